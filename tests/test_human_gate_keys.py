"""Host-side pieces of SSH for human attempts that need no Docker: checking the expert's
public key (against the real `ssh-keygen`), and reading and playing a recorded cast."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from rebench.errors import RebenchError
from rebench.sandbox.cast import load_cast, play_cast
from rebench.sandbox.docker.ssh import check_public_key, key_fingerprint


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen (OpenSSH client) is not installed")
    key = tmp_path_factory.mktemp("key") / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "expert@example", "-f", str(key)], check=True)
    return key


def test_a_public_key_is_accepted_and_fingerprinted_like_ssh_keygen(keypair: Path) -> None:
    text = keypair.with_suffix(".pub").read_text()
    assert check_public_key("# my key\n\n" + text) == text.strip()
    listed = subprocess.run(["ssh-keygen", "-lf", str(keypair.with_suffix(".pub"))], capture_output=True,
                            text=True, check=True).stdout
    assert key_fingerprint(text) == listed.split()[1]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda key, _: key + "\n" + key, "exactly one"),
        (lambda _, private: private, "private key"),
        (lambda key, _: 'command="sh" ' + key, "not an OpenSSH public key"),
        (lambda key, _: "ssh-rsa " + key.split()[1], "does not hold a ssh-rsa key"),
        (lambda key, _: key.split()[0] + " not*base64", "not valid base64"),
        (lambda _, __: "", "found 0"),
    ],
)
def test_a_bad_key_file_is_refused_with_what_is_wrong(
    keypair: Path, mutate: Callable[[str, str], str], message: str
) -> None:
    text = mutate(keypair.with_suffix(".pub").read_text().strip(), keypair.read_text())
    with pytest.raises(RebenchError, match=message):
        check_public_key(text)


def test_a_cast_loads_and_plays_its_output_with_capped_pauses(tmp_path: Path) -> None:
    cast = tmp_path / "session-1.cast"
    lines = [{"version": 2, "width": 80, "height": 24, "timestamp": 1}, [0.5, "o", "$ "], [0.7, "i", "ls\r"],
             [10.7, "o", "a.txt\r\n"]]
    cast.write_text("\n".join(json.dumps(line) for line in lines) + '\n[11.0, "o", "torn')
    header, events = load_cast(cast)
    assert header["width"] == 80 and events == [(0.5, "o", "$ "), (0.7, "i", "ls\r"), (10.7, "o", "a.txt\r\n")]
    out, waits = io.StringIO(), []
    play_cast(cast, out, speed=2.0, max_idle=2.0, sleep=waits.append)
    assert out.getvalue() == "$ a.txt\r\n"
    assert waits == [0.25, 1.0]
    (tmp_path / "bad.cast").write_text("not json\n")
    with pytest.raises(RebenchError, match="not an asciinema v2 recording"):
        load_cast(tmp_path / "bad.cast")
    (tmp_path / "middle.cast").write_text(json.dumps(lines[0]) + '\n[1, "o"\n[2, "o", "x"]\n')
    with pytest.raises(RebenchError, match="line 2 is not"):
        load_cast(tmp_path / "middle.cast")
    with pytest.raises(RebenchError, match="speed"):
        play_cast(cast, out, speed=0)


def test_a_keep_alive_sandbox_needs_a_short_gate_folder(tmp_path: Path) -> None:
    """Checked before anything starts: no Docker needed."""
    from rebench.errors import SandboxStartError
    from rebench.sandbox.base import SandboxSpec
    from rebench.sandbox.docker import DockerSandbox

    spec = {"attempt_id": 1, "environment": "e", "profile": "tiny", "image": "img", "keep_alive": True}
    with pytest.raises(SandboxStartError, match="needs a gate_dir"):
        DockerSandbox(SandboxSpec(**spec))
    deep = tmp_path / ("x" * 120)
    with pytest.raises(SandboxStartError, match="too long a path"):
        DockerSandbox(SandboxSpec(**spec, gate_dir=str(deep)))
    assert DockerSandbox(SandboxSpec(**spec, gate_dir="/tmp/rbh-short")).gate_dir == Path("/tmp/rbh-short")


def test_the_relay_copies_both_ways_and_closes_quietly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """SshRelay alone: a real Unix socket server in the gate folder stands where sshd is (the Docker
    tests cover the real one); closing the relay drops an open connection without an asyncio error."""
    import asyncio
    import logging
    import tempfile

    from rebench.sandbox.docker.ssh import SshRelay

    gate = Path(tempfile.mkdtemp(prefix="rbh-"))

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data.upper())
            await writer.drain()

    async def go() -> None:
        inner = await asyncio.start_unix_server(echo, str(gate / "ssh.sock"))
        relay = SshRelay(gate)
        port = await relay.start()
        with pytest.raises(RebenchError, match=f"cannot listen on 127.0.0.1:{port}"):
            await SshRelay(gate, port=port).start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello")
        assert await reader.readexactly(5) == b"HELLO"
        await relay.close()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        inner.close()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        try:
            asyncio.run(go())
        finally:
            shutil.rmtree(gate, ignore_errors=True)
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text
