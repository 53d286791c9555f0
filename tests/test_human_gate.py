"""The container side of human attempts, on a real Docker engine with the real OpenSSH
client: a keep-alive sandbox that outlives its harness, the `task` socket, SSH through
the host relay with only the expert's key, recorded sessions, freezing during a score
call, and closing SSH. One container serves the module; the tests run in file order
(reattaching and closing SSH come last)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import pty
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rebench.errors import SandboxDied, SandboxStartError
from rebench.sandbox.base import SandboxSpec
from rebench.sandbox.cast import load_cast
from rebench.sandbox.docker import LABEL_HUMAN, DockerSandbox
from rebench.sandbox.docker.ssh import SshRelay, close_ssh, open_ssh, read_sessions, recordings
from rebench.sandbox.docker.tasks import TaskReply, TaskRequest

from .docker_support import base_image, docker_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow]
T = TypeVar("T")
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
               "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"]


class Harness:
    """A harness in a thread of its own (its event loop runs the relay and the sandbox) while
    the test drives the real `ssh` client from the main thread."""

    def __init__(self, tmp: Path) -> None:
        if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
            pytest.skip("the OpenSSH client (ssh, ssh-keygen) is not installed")
        self.engine = docker_engine()
        self.image = base_image(self.engine)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.gate = Path(tempfile.mkdtemp(prefix="rbh-"))
        self.key = tmp / "expert"
        self.other_key = tmp / "other"
        for key in (self.key, self.other_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        self.spec = SandboxSpec(attempt_id=990_013, environment="test", profile="tiny", image=self.image,
                                cpus=1.0, memory_gb=1.0, keep_alive=True, gate_dir=str(self.gate))
        self.sandbox = DockerSandbox(self.spec, engine=self.engine)
        self.call(self.sandbox.start())
        self.call(open_ssh(self.sandbox, self.key.with_suffix(".pub").read_text()))
        self.relay = SshRelay(self.gate)
        self.port = self.call(self.relay.start())
        self.requests: list[TaskRequest] = []

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def ssh_argv(self, *args: str, key: Path | None = None, user: str = "agent") -> list[str]:
        return ["ssh", "-i", str(key or self.key), "-p", str(self.port), *SSH_OPTIONS, *args, f"{user}@127.0.0.1"]

    def ssh(
        self, command: str, *, stdin: str | None = None, tty: bool = False, **kw: Any
    ) -> subprocess.CompletedProcess[str]:
        argv = self.ssh_argv(*(["-tt"] if tty else []), **kw)
        return subprocess.run([*argv, *([command] if command else [])], input=stdin or "", capture_output=True,
                              text=True, timeout=60)

    async def handler(self, request: TaskRequest) -> TaskReply:
        self.requests.append(request)
        return TaskReply(exit_code=4, output=f"handled {request.command} {' '.join(request.args)}\n")

    def close(self) -> None:
        self.call(self.relay.close())
        self.call(self.sandbox.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        shutil.rmtree(self.gate, ignore_errors=True)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    made = Harness(tmp_path_factory.mktemp("keys"))
    try:
        yield made
    finally:
        made.close()


def test_commands_and_a_pty_session_run_as_the_agent_and_are_recorded_by_root(harness: Harness) -> None:
    done = harness.ssh("id -un; echo out-$((6*7)); exit 7")
    assert done.returncode == 7, done.stderr
    assert done.stdout.splitlines() == ["agent", "out-42"]

    shell = harness.ssh("", tty=True, stdin="echo typed-$((7*8))\nexit\n")
    assert shell.returncode == 0, shell.stderr
    assert "typed-56" in shell.stdout

    closed = [s for s in read_sessions(harness.gate) if s["event"] == "close"]
    by_mode = {s["mode"]: s for s in closed}
    assert by_mode["exec"]["command"] == "id -un; echo out-$((6*7)); exit 7"
    assert by_mode["exec"]["bytes_out"] == len("agent\nout-42\n")
    assert by_mode["pty"]["command"] is None and by_mode["pty"]["bytes_in"] > 0
    header, events = load_cast(harness.gate / by_mode["pty"]["recording"])
    assert header["version"] == 2
    shown = "".join(data for _, kind, data in events if kind == "o")
    typed = "".join(data for _, kind, data in events if kind == "i")
    assert "typed-56" in shown and "echo typed-$((7*8))" in typed
    assert [p.name for p in recordings(harness.gate)] == [f"session-{s['session']}.cast" for s in closed]

    # The recordings, the relay's socket and the channel are root's: the agent reaches none of them.
    connect = "python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])'"
    probe = harness.call(harness.sandbox.exec(
        f"ls /run/rebench/gate/casts; {connect} /run/rebench/gate/harness.sock; {connect} /run/rebench/gate/ssh.sock",
        user="agent"))
    assert probe.exit_code != 0 and probe.stderr.count("Permission denied") == 3, probe.stderr


def test_the_expert_cannot_reach_the_recorded_terminal_past_the_recorder(harness: Harness) -> None:
    """sshd gives the session's outer terminal to the agent's uid; a program of the expert's that
    opened it could type and print past the recording. The recorder takes it over (root's, 0600),
    and the forced-command wrapper keeps no copy and cannot be traced or have its fds opened."""
    probe = ("find /dev/pts -user agent | sed 's/^/owned:/'; "
             "for p in $(pgrep -u agent -f session.py); do ls /proc/$p/fd >/dev/null 2>&1 && echo fds:$p; "
             "readlink /proc/$p/fd/* 2>/dev/null | grep -q pts && echo tty:$p; done; exit 0\n")
    shell = harness.ssh("", tty=True, stdin=probe)
    assert shell.returncode == 0, shell.stderr
    assert "owned:/dev/pts" not in shell.stdout and "fds:" not in shell.stdout.replace("echo fds:", "")
    assert "tty:" not in shell.stdout.replace("echo tty:", "")


def test_scp_copies_files_in_and_out(harness: Harness, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("payload-1\n" * 1000)
    scp = ["scp", "-i", str(harness.key), "-P", str(harness.port), *SSH_OPTIONS]
    sent = subprocess.run([*scp, str(source), "agent@127.0.0.1:/home/agent/in.txt"], capture_output=True,
                          text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    harness.call(harness.sandbox.exec("cp in.txt out.txt && echo more >> out.txt", user="agent", cwd="/home/agent"))
    back = tmp_path / "out.txt"
    got = subprocess.run([*scp, "agent@127.0.0.1:/home/agent/out.txt", str(back)], capture_output=True, text=True,
                         timeout=60)
    assert got.returncode == 0, got.stderr
    assert back.read_text() == source.read_text() + "more\n"
    sftp = [s for s in read_sessions(harness.gate) if s["mode"] == "sftp" and s["event"] == "close"]
    assert len(sftp) == 2 and all(s["recording"] is None for s in sftp)
    assert sftp[0]["bytes_in"] > 10_000  # the file went through, counted but not recorded


def test_only_the_experts_key_logs_in_as_the_agent(harness: Harness) -> None:
    other = harness.ssh("true", key=harness.other_key)
    assert other.returncode == 255 and "Permission denied" in other.stderr
    root = harness.ssh("true", user="root")
    assert root.returncode == 255 and "Permission denied" in root.stderr
    password = subprocess.run(
        ["ssh", "-p", str(harness.port), *SSH_OPTIONS, "-o", "PreferredAuthentications=password,keyboard-interactive",
         "-o", "PubkeyAuthentication=no", "agent@127.0.0.1", "true"], capture_output=True, text=True, timeout=60)
    assert password.returncode == 255 and "Permission denied (publickey)" in password.stderr
    # No remote forwarding: nothing in the container reaches out through the expert's connection.
    forward = subprocess.run([*harness.ssh_argv("-R", "0:127.0.0.1:9", "-o", "ExitOnForwardFailure=yes"), "true"],
                             capture_output=True, text=True, timeout=60)
    assert forward.returncode == 255 and "forwarding failed" in forward.stderr
    protected = harness.ssh("cat /protected/*; ls /protected")
    assert protected.returncode != 0 and "Permission denied" in protected.stderr
    # The expert cannot add a key: the authorized keys file is root's and outside the home.
    planted = harness.ssh(f"mkdir -p ~/.ssh && echo '{harness.other_key.with_suffix('.pub').read_text().strip()}' "
                          ">> ~/.ssh/authorized_keys; echo x >> /etc/rebench-ssh/keys/agent")
    assert "Permission denied" in planted.stderr
    assert harness.ssh("true", key=harness.other_key).returncode == 255


def test_local_forwarding_reaches_only_the_containers_loopback(harness: Harness) -> None:
    """What VS Code Remote-SSH needs: a tunnel from the expert's machine to a server the expert
    runs inside the container; a tunnel to any other address is refused by sshd."""
    server = harness.ssh("nohup python3 -c \"import socket; s=socket.socket(); "
                         "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', 8765)); "
                         "s.listen(); c, _ = s.accept(); c.sendall(b'inside-' + c.recv(5)); c.close()\" "
                         ">/dev/null 2>&1 & sleep 0.5")
    assert server.returncode == 0, server.stderr
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        local_port = probe.getsockname()[1]
    tunnel = subprocess.Popen([*harness.ssh_argv("-N", "-L", f"{local_port}:127.0.0.1:8765",
                                                 "-o", "ExitOnForwardFailure=yes")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        reply = b""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not reply:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", local_port), 2) as conn:
                conn.sendall(b"hello")
                reply = conn.recv(100)
            if not reply:
                time.sleep(0.2)
        assert reply == b"inside-hello"
    finally:
        tunnel.terminate()
        tunnel.wait(10)
    verbose = [o if o != "LogLevel=ERROR" else "LogLevel=INFO" for o in harness.ssh_argv("-W", "10.1.2.3:80")]
    elsewhere = subprocess.run(verbose, capture_output=True, text=True, timeout=60)
    assert elsewhere.returncode == 255 and "prohibited" in elsewhere.stderr, elsewhere.stderr


def test_the_task_command_reaches_the_handler_only_from_the_agent(harness: Harness) -> None:
    nobody = harness.ssh("task status")
    assert nobody.returncode == 3 and f"rebench human attach {harness.spec.attempt_id}" in nobody.stdout

    harness.sandbox.task_handler = harness.handler
    asked = harness.ssh("task note 'a b' c")
    assert asked.returncode == 4 and asked.stdout == "handled note a b c\n"
    (request,) = harness.requests
    assert request.command == "note" and request.args == ["a b", "c"] and request.uid == 1000

    for user in ("root", "scorer"):
        other = harness.call(harness.sandbox.exec(["/usr/local/bin/task", "status"], user=user))
        assert other.exit_code == 126 and "refused" in other.stdout
    assert len(harness.requests) == 1

    async def score(request: TaskRequest) -> TaskReply:
        """As `task score` does: a scoring call, which freezes the agent, the asking client included."""
        result = await harness.sandbox.exec("ps -u agent -o stat= | sort | uniq -c | tr -s ' '", user="scorer")
        return TaskReply(output=f"during the score: {result.stdout.strip()}\n")

    harness.sandbox.task_handler = score
    scored = harness.ssh("task score")
    assert scored.returncode == 0, scored.stderr
    states = scored.stdout.removeprefix("during the score: ").split()[1::2]
    assert states and all(state[0] in "DT" for state in states), scored.stdout  # frozen by the cgroup freezer


def test_a_score_call_freezes_ssh_sessions_and_they_continue_after(harness: Harness) -> None:
    ticker = subprocess.Popen(
        [*harness.ssh_argv(), "while :; do date +%s%N >> /home/agent/ticks; sleep 0.02; done"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: harness.call(harness.sandbox.exec("wc -l < ticks", cwd="/home/agent")).stdout.strip()
                 not in ("", "0"), "the SSH session to start ticking")
        score = asyncio.run_coroutine_threadsafe(harness.sandbox.exec(
            "a=$(wc -l < /home/agent/ticks); sleep 1.5; b=$(wc -l < /home/agent/ticks); echo $a $b $(date +%s.%N)",
            user="scorer"), harness.loop)
        time.sleep(0.5)
        # A session opened during the score call starts only after it (a root sshd would start it at once).
        late = subprocess.run([*harness.ssh_argv(), "date +%s.%N"], capture_output=True, text=True, timeout=60)
        scored = score.result(60)
        before, after, ended = scored.stdout.split()
        assert before == after, "the session ran on during the score call"
        assert float(late.stdout) >= float(ended)
        grown = harness.call(harness.sandbox.exec("sleep 0.5; wc -l < ticks", cwd="/home/agent")).stdout
        assert int(grown) > int(after)
        assert ticker.poll() is None
    finally:
        ticker.kill()
        ticker.wait()


def test_a_sigcont_timer_in_an_ssh_session_does_not_run_through_a_score_call(harness: Harness) -> None:
    """Issue 24, route 5, for humans: a process of the expert's with a SIGCONT handler and a POSIX
    timer waking it every 50 ms stays frozen for the whole score call (the cgroup freezer)."""
    from tests.adversarial.test_freeze_escape import WAKER, beats_between

    harness.call(harness.sandbox.write_file("/home/agent/waker.py", WAKER.encode()))
    waker = subprocess.Popen([*harness.ssh_argv(), "python3 /home/agent/waker.py /home/agent/beats"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: harness.call(harness.sandbox.exec("wc -l < beats", cwd="/home/agent")).stdout.strip()
                 not in ("", "0"), "the waker to start")
        scored = harness.call(harness.sandbox.exec("date +%s.%N; sleep 2; date +%s.%N", user="scorer"))
        start, end = (float(x) for x in scored.stdout.split())
        time.sleep(0.5)
        log = harness.call(harness.sandbox.exec("cat beats", cwd="/home/agent")).stdout
        assert beats_between(log, start + 0.05, end - 0.05) == 0, "the expert's process ran during the score call"
        assert max(float(x) for x in log.split()) > end  # and it runs on after
    finally:
        waker.kill()
        waker.wait()


def test_the_container_outlives_its_harness_and_a_new_one_reattaches(harness: Harness) -> None:
    session = subprocess.Popen([*harness.ssh_argv(), "echo connected; sleep 600"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert session.stdout is not None and session.stdout.readline() == "connected\n"
    in_flight = asyncio.run_coroutine_threadsafe(
        harness.sandbox.exec("sleep 300", user="agent", env={"MARK": "harness-command"}), harness.loop)

    async def never(request: TaskRequest) -> TaskReply:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    harness.sandbox.task_handler = never
    waiting = subprocess.Popen([*harness.ssh_argv(), "task score"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.8)
    old = harness.sandbox
    harness.call(old.detach())
    assert not harness.call(old.alive())
    with pytest.raises(SandboxDied):
        in_flight.result(10)
    out, _ = waiting.communicate(timeout=10)  # a `task` waiting on the harness is told it went away
    assert waiting.returncode == 3 and "harness disconnected" in out and "rebench human attach" in out
    harness.sandbox.task_handler = None
    container = harness.engine.client.containers.get(old.container_id)
    assert container.status == "running" and container.labels[LABEL_HUMAN] == str(harness.spec.attempt_id)
    # Nobody answers `task` while no harness is attached.
    nobody = harness.ssh("task status")
    assert nobody.returncode == 3 and "rebench human attach" in nobody.stdout

    harness.sandbox = harness.call(DockerSandbox.reattach(harness.spec, str(old.container_id), engine=harness.engine))
    harness.sandbox.task_handler = harness.handler
    assert harness.call(harness.sandbox.alive())
    left = harness.call(harness.sandbox.exec("ps -eo args", user="root")).stdout
    assert "sleep 600" in left and "sleep 300" not in left  # the session lives; the old harness's command died
    assert session.poll() is None
    assert harness.ssh("task submit").stdout == "handled submit \n"
    session.kill()
    session.wait()

    with pytest.raises(SandboxDied):
        harness.call(DockerSandbox.reattach(harness.spec, "0" * 64, engine=harness.engine))


def test_window_size_follows_the_client_and_a_dead_gate_is_restarted(harness: Harness) -> None:
    """The client runs in a real pty (as an expert's terminal): resizing it reaches the session's command."""
    pid, master = pty.fork()
    if pid == 0:  # the child: set the terminal's size, then become the ssh client
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        os.execvp("ssh", [*harness.ssh_argv("-t"), "stty size; while sleep 0.1; do stty size; done"])
    seen = b""
    try:
        seen = read_until(master, b"30 100", seen)
        # the resize travels: client -> sshd -> wrapper -> gate -> the session's pty
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        seen = read_until(master, b"40 120", seen)
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(master)

    harness.call(harness.sandbox.exec("kill -KILL $(cat /etc/rebench-ssh/gate.pid)", user="root"))
    assert harness.ssh("true").returncode == 255
    harness.call(open_ssh(harness.sandbox, harness.key.with_suffix(".pub").read_text()))
    again = harness.ssh("echo back")
    assert again.stdout == "back\n"
    numbers = [s["session"] for s in read_sessions(harness.gate) if s["event"] == "open"]
    assert len(numbers) == len(set(numbers)), "a restarted gate reused session numbers"


def read_until(fd: int, wanted: bytes, seen: bytes, timeout: float = 15.0) -> bytes:
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError(f"no {wanted!r} in {seen!r}")
        seen += os.read(fd, 4096)
    return seen


def test_close_ssh_drops_open_sessions_within_five_seconds(harness: Harness) -> None:
    session = subprocess.Popen([*harness.ssh_argv(), "echo connected; sleep 600"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert session.stdout is not None and session.stdout.readline() == "connected\n"
    began = time.monotonic()
    harness.call(close_ssh(harness.sandbox))
    session.wait(timeout=5)
    assert time.monotonic() - began < 5
    assert harness.ssh("true").returncode == 255
    agent = harness.call(harness.sandbox.exec("ps -u agent -o pid=", user="root"))
    assert agent.stdout.strip() == ""
    closes = [json.dumps(s) for s in read_sessions(harness.gate) if s["event"] == "close"]
    assert any("sleep 600" in line for line in closes)


def wait_for(check: Any, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


HARNESS_SCRIPT = """
import asyncio, sys
from rebench.sandbox.base import SandboxSpec
from rebench.sandbox.docker import DockerSandbox

async def main():
    sandbox = DockerSandbox(SandboxSpec.model_validate_json(sys.argv[1]))
    await sandbox.start()
    await sandbox.exec("setsid sleep 301 >/dev/null 2>&1 < /dev/null &", user="agent")
    print(sandbox.container_id, flush=True)
    await sandbox.exec("sleep 302", user="agent")

asyncio.run(main())
"""


def test_a_killed_harness_leaves_the_container_running_for_the_next_one(tmp_path: Path) -> None:
    engine = docker_engine()
    gate = Path(tempfile.mkdtemp(prefix="rbh-"))
    spec = SandboxSpec(attempt_id=990_014, environment="test", profile="tiny", image=base_image(engine), cpus=1.0,
                       memory_gb=1.0, keep_alive=True, gate_dir=str(gate))
    dying = subprocess.Popen([sys.executable, "-c", HARNESS_SCRIPT, spec.model_dump_json()], stdout=subprocess.PIPE,
                             text=True)
    container_id = ""
    try:
        assert dying.stdout is not None
        container_id = dying.stdout.readline().strip()
        assert container_id, "the harness did not start its sandbox"
        time.sleep(0.5)
        dying.kill()  # SIGKILL: no cleanup at all, as when the operator's terminal dies
        dying.wait()

        async def come_back() -> str:
            sandbox = await DockerSandbox.reattach(spec, container_id, engine=engine)
            try:
                return (await sandbox.exec("ps -eo args", user="root")).stdout
            finally:
                await sandbox.stop()

        processes = asyncio.run(come_back())
        assert "sleep 301" in processes and "sleep 302" not in processes
        assert not [c for c in engine.containers(LABEL_HUMAN) if c[0] == container_id]  # stop() removed it
    finally:
        dying.kill()
        if container_id:
            engine.remove_container(container_id)
        shutil.rmtree(gate, ignore_errors=True)


def test_a_keep_alive_server_that_fails_at_start_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server source is swapped for one that exits (as a broken image's would): start() says why
    within seconds, not after the connect timeout, and leaves no container behind."""
    import rebench.sandbox.docker.container as module

    monkeypatch.setattr(module, "SERVER_SOURCE", b"import sys\nsys.exit('broken exec server')\n")
    engine = docker_engine()
    gate = Path(tempfile.mkdtemp(prefix="rbh-"))
    spec = SandboxSpec(attempt_id=990_015, environment="test", profile="tiny", image=base_image(engine), cpus=1.0,
                       memory_gb=1.0, keep_alive=True, gate_dir=str(gate))
    began = time.monotonic()
    try:
        with pytest.raises(SandboxStartError, match=r"container stopped.*broken exec server"):
            asyncio.run(DockerSandbox(spec, engine=engine).start())
        assert time.monotonic() - began < 8
        assert not [c for c in engine.containers(LABEL_HUMAN) if c[3].get(LABEL_HUMAN) == "990015"]
    finally:
        shutil.rmtree(gate, ignore_errors=True)


