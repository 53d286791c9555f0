"""The container side of human attempts, on a real Docker engine with the real OpenSSH
client: a keep-alive sandbox that outlives its harness, the `task` socket, SSH through
the host relay with only the expert's key, recorded sessions, freezing during a score
call, and closing SSH. One container serves the module; the tests run in file order
(reattaching and closing SSH come last)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rebench.errors import SandboxDied
from rebench.sandbox.base import SandboxSpec
from rebench.sandbox.docker import LABEL_HUMAN, DockerSandbox
from rebench.sandbox.docker.cast import load_cast
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
    probe = harness.call(harness.sandbox.exec(
        "ls /run/rebench/gate/casts; python3 -c \"import socket,sys; s=socket.socket(socket.AF_UNIX); "
        "s.connect(sys.argv[1])\" /run/rebench/gate/harness.sock", user="agent"))
    assert probe.exit_code != 0 and probe.stderr.count("Permission denied") == 2, probe.stderr


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
    protected = harness.ssh("cat /protected/*; ls /protected")
    assert protected.returncode != 0 and "Permission denied" in protected.stderr
    # The expert cannot add a key: the authorized keys file is root's and outside the home.
    planted = harness.ssh(f"mkdir -p ~/.ssh && echo '{harness.other_key.with_suffix('.pub').read_text().strip()}' "
                          ">> ~/.ssh/authorized_keys; echo x >> /etc/rebench-ssh/keys/agent")
    assert "Permission denied" in planted.stderr
    assert harness.ssh("true", key=harness.other_key).returncode == 255


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


def test_a_score_call_freezes_ssh_sessions_and_they_continue_after(harness: Harness) -> None:
    ticker = subprocess.Popen(
        [*harness.ssh_argv(), "while :; do date +%s%N >> /home/agent/ticks; sleep 0.02; done"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: harness.call(harness.sandbox.exec("wc -l < ticks", cwd="/home/agent")).stdout.strip()
                 not in ("", "0"), "the SSH session to start ticking")
        scored = harness.call(harness.sandbox.exec("a=$(wc -l < /home/agent/ticks); sleep 1; b=$(wc -l < "
                                                   "/home/agent/ticks); echo $a $b", user="scorer"))
        before, after = scored.stdout.split()
        assert before == after, "the session ran on during the score call"
        grown = harness.call(harness.sandbox.exec("sleep 0.5; wc -l < ticks", cwd="/home/agent")).stdout
        assert int(grown) > int(after)
        assert ticker.poll() is None
    finally:
        ticker.kill()
        ticker.wait()


def test_the_container_outlives_its_harness_and_a_new_one_reattaches(harness: Harness) -> None:
    session = subprocess.Popen([*harness.ssh_argv(), "echo connected; sleep 600"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert session.stdout is not None and session.stdout.readline() == "connected\n"
    in_flight = asyncio.run_coroutine_threadsafe(
        harness.sandbox.exec("sleep 300", user="agent", env={"MARK": "harness-command"}), harness.loop)
    time.sleep(0.5)
    old = harness.sandbox
    harness.call(old.detach())
    assert not harness.call(old.alive())
    with pytest.raises(SandboxDied):
        in_flight.result(10)
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
