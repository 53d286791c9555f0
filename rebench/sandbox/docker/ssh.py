"""SSH into a human attempt's keep-alive container, without giving it a network.

The container has no network, so nothing listens on a port inside it. The harness listens
on the host (`SshRelay`, loopback by default) and relays each TCP connection to the gate
folder's `ssh.sock`; there the root gate daemon (rebench/sandbox/human/gate.py) hands it to
its own `sshd -i`. sshd allows only the agent user with only the expert's public key (kept
in a root-owned file the expert cannot add to), no password, no root, no forwarding; its
ForceCommand hands every session (pty, command, sftp) to the gate, which runs it as the
agent and records it as root into `casts/` and `sessions.jsonl` of the gate folder.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import json
import os
import re
import struct
from pathlib import Path
from typing import Any

from rebench.errors import RebenchError, SandboxError
from rebench.sandbox.docker.sandbox import DockerSandbox

_SCRIPTS = Path(__file__).parents[1] / "human"
SCRIPT_DIR = "/usr/local/lib/rebench"
TASK_CLIENT = "/usr/local/bin/task"
SSH_DIR = "/etc/rebench-ssh"
KEYS_FILE = f"{SSH_DIR}/keys/agent"
CONFIG_FILE = f"{SSH_DIR}/sshd_config"
HOST_KEY = f"{SSH_DIR}/ssh_host_ed25519_key"
GATE_PID = f"{SSH_DIR}/gate.pid"
SSH_SOCKET = "ssh.sock"
KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)

SSHD_CONFIG = f"""\
# rebench: sshd for a human attempt, started per connection as `sshd -i` by the gate.
HostKey {HOST_KEY}
PidFile none
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
HostbasedAuthentication no
PermitEmptyPasswords no
PermitRootLogin no
AllowUsers agent
UsePAM no
AuthorizedKeysFile {SSH_DIR}/keys/%u
StrictModes yes
PermitUserEnvironment no
PermitUserRC no
AllowAgentForwarding no
# Local forwarding to the container's own loopback only (VS Code Remote-SSH talks to its server
# that way); the container has no other network, and nothing may listen for the expert's side.
AllowTcpForwarding local
PermitOpen localhost:* 127.0.0.1:*
PermitListen none
AllowStreamLocalForwarding no
X11Forwarding no
PermitTunnel no
GatewayPorts no
PrintMotd no
PrintLastLog no
MaxAuthTries 3
LoginGraceTime 30
ForceCommand /usr/bin/python3 -I {SCRIPT_DIR}/session.py
Subsystem sftp /usr/lib/openssh/sftp-server
"""

_SETUP = f"""
set -eu
chown -R root:root {SSH_DIR} {SCRIPT_DIR}
chmod 0755 {SSH_DIR} {SSH_DIR}/keys {SCRIPT_DIR}
[ -s {HOST_KEY} ] || ssh-keygen -q -t ed25519 -N '' -C rebench-attempt -f {HOST_KEY}
# UsePAM no: sshd refuses a locked account ("!"); "*" is unlocked and still has no password.
case "$(getent shadow agent | cut -d: -f2)" in '!'*) usermod -p '*' agent ;; esac
# /etc/profile resets PATH for login shells; keep the image's (its virtualenv first).
printf 'export PATH="%s"\\n' "$PATH" > /etc/profile.d/zz-rebench-path.sh
/usr/sbin/sshd -t -f {CONFIG_FILE}
pid=$(cat {GATE_PID} 2>/dev/null || true)
if [ -z "$pid" ] || ! grep -qs gate.py /proc/"$pid"/cmdline; then
  rm -f /run/rebench/gate/ssh.sock
  env -u REBENCH_EXEC_ID setsid -f /usr/bin/python3 -I {SCRIPT_DIR}/gate.py \\
    </dev/null >/dev/null 2>>/run/rebench/gate/gate.log
  for _ in $(seq 100); do [ -S /run/rebench/gate/ssh.sock ] && break; sleep 0.05; done
  [ -S /run/rebench/gate/ssh.sock ] || {{ echo "the gate did not start"; tail -5 /run/rebench/gate/gate.log; exit 1; }}
fi
"""

_TEARDOWN = f"""
rm -f {KEYS_FILE}
pid=$(cat {GATE_PID} 2>/dev/null || true)
if [ -n "$pid" ] && grep -qs gate.py /proc/"$pid"/cmdline; then
  kill -TERM "$pid"
  for _ in $(seq 40); do [ -d /proc/"$pid" ] || break; sleep 0.05; done
  [ -d /proc/"$pid" ] && kill -KILL "$pid"
fi
rm -f {GATE_PID} /run/rebench/gate/ssh.sock
true
"""


def check_public_key(text: str) -> str:
    """The one OpenSSH public key line in `text` (as authorized_keys wants it); RebenchError saying what is wrong."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if any("PRIVATE KEY" in line for line in lines):
        raise RebenchError("that is a private key; give the public key (the .pub file)")
    if len(lines) != 1:
        raise RebenchError(f"expected exactly one OpenSSH public key line, found {len(lines)}")
    parts = lines[0].split()
    if parts[0] not in KEY_TYPES:
        raise RebenchError(
            f"not an OpenSSH public key: starts with {parts[0][:40]!r} (key options are not accepted); "
            f"allowed types: {', '.join(KEY_TYPES)}"
        )
    if len(parts) < 2:
        raise RebenchError(f"the {parts[0]} key has no key data")
    try:
        blob = base64.b64decode(parts[1], validate=True)
        (size,) = struct.unpack(">I", blob[:4])
        inner = blob[4 : 4 + size].decode("ascii")
    except (binascii.Error, struct.error, UnicodeDecodeError):
        raise RebenchError(f"the {parts[0]} key's data is not valid base64 key data") from None
    if inner != parts[0] or len(blob) < 4 + size + 16:
        raise RebenchError(f"the key data does not hold a {parts[0]} key")
    comment = re.sub(r"[^\w.@+=:/-]", "_", " ".join(parts[2:]))[:100]
    return " ".join([parts[0], parts[1], *([comment] if comment else [])])


def key_fingerprint(public_key: str) -> str:
    """OpenSSH's SHA256 fingerprint of a public key line (what `ssh-keygen -lf` prints)."""
    blob = base64.b64decode(check_public_key(public_key).split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


async def _root(sandbox: DockerSandbox, script: str, what: str, *, agent_side: bool = False) -> None:
    result = await sandbox.exec(["bash", "-c", script], user="root", cwd="/", timeout=60, agent_side=agent_side)
    if not result.ok:
        detail = (result.stdout + result.stderr).strip()[-400:]
        raise SandboxError(f"{what} failed in attempt {sandbox.spec.attempt_id}: {detail}")


async def open_ssh(sandbox: DockerSandbox, public_key: str) -> None:
    """Let the expert in with exactly this key (idempotent: also restarts a dead gate)."""
    key = check_public_key(public_key)
    if not sandbox.spec.keep_alive:
        raise SandboxError(f"attempt {sandbox.spec.attempt_id}: SSH needs a keep-alive sandbox")
    for name in ("gate.py", "relay.py", "session.py"):
        await sandbox.write_file(f"{SCRIPT_DIR}/{name}", (_SCRIPTS / name).read_bytes(), user="root", mode=0o755)
    await sandbox.write_file(TASK_CLIENT, (_SCRIPTS / "task.py").read_bytes(), user="root", mode=0o755)
    await sandbox.write_file(CONFIG_FILE, SSHD_CONFIG.encode(), user="root", mode=0o644)
    await sandbox.write_file(KEYS_FILE, (key + "\n").encode(), user="root", mode=0o644)
    # The gate runs the expert's shells: it lives in the agent's cgroup, frozen and killed with them.
    await _root(sandbox, _SETUP, "starting the SSH gate", agent_side=True)


async def close_ssh(sandbox: DockerSandbox) -> None:
    """Remove the key, stop the gate and end every session (every process of the agent dies)."""
    await _root(sandbox, _TEARDOWN, "closing SSH")
    await sandbox.kill_agent_processes()


class SshRelay:
    """Listens on the host and relays each TCP connection to the container's sshd (via ssh.sock)."""

    def __init__(self, gate_dir: Path, bind: str = "127.0.0.1", port: int = 0) -> None:
        self.gate_dir = Path(gate_dir)
        self.bind = bind
        self.port = port
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Start listening; returns the port actually bound (a RebenchError if it is taken)."""
        try:
            self._server = await asyncio.start_server(self._connection, self.bind, self.port)
        except OSError as exc:
            raise RebenchError(f"cannot listen on {self.bind}:{self.port}: {exc.strerror or exc}") from None
        return int(self._server.sockets[0].getsockname()[1])

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._links.add(task)
        try:
            try:
                inner_reader, inner_writer = await asyncio.open_unix_connection(str(self.gate_dir / SSH_SOCKET))
            except OSError:
                return  # no gate (SSH closed): the client sees the connection drop
            try:
                await asyncio.gather(_pipe(reader, inner_writer), _pipe(inner_reader, writer))
            finally:
                inner_writer.close()
        except asyncio.CancelledError:
            pass  # close(): ending quietly (the server's callback would log a cancelled handler as an error)
        finally:
            writer.close()
            self._links.discard(task)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._links):
            task.cancel()
        for task in list(self._links):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await self._server.wait_closed()
            self._server = None


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


def read_sessions(gate_dir: Path) -> list[dict[str, Any]]:
    """The open/close lines of sessions.jsonl (a torn last line is skipped)."""
    path = Path(gate_dir) / "sessions.jsonl"
    if path.is_symlink() or not path.is_file():
        return []  # written from inside the container: no symlink out of the gate folder is followed
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        text = handle.read().decode("utf-8", errors="replace")
    found = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict):
                found.append(entry)
    return found


def recordings(gate_dir: Path) -> list[Path]:
    """The session casts in the gate folder, by session number."""
    casts = (Path(gate_dir) / "casts").glob("session-*.cast")

    def number(path: Path) -> int:
        digits = path.stem.removeprefix("session-")
        return int(digits) if digits.isdigit() else 0

    return sorted(casts, key=number)
