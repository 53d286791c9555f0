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
from rebench.sandbox.docker.cast import load_cast, play_cast
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
    with pytest.raises(RebenchError, match="speed"):
        play_cast(cast, out, speed=0)
