"""/dev/shm after a score call on the local backend (rebench.kit.confined): what the submitted
code made there is removed when its child closes, except an entry a live process still maps (a
parallel build's semaphore, matched by inode). The attack: the submitted code gives a file that
a long-lived process maps a new name (a second one, or its own moved) and writes into it, hoping the
name outlives the call because its inode is mapped. A name made during the call for a file that
was already there is removed. The child is a plain ConfinedChild: on the local backend the submitted code has the
scorer's uid and may write /dev/shm (rebench/kit/landlock.py), so its rights here are the same."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rebench.kit.confined import ConfinedChild

pytestmark = [pytest.mark.adversarial]

HOLDER = """
import mmap, sys
with open(sys.argv[1], "w+b") as handle:
    handle.truncate(4096)
    mapped = mmap.mmap(handle.fileno(), 4096)
print("ready", flush=True)
sys.stdin.read()
"""


# how the submitted code gives the long-lived process's file its new name: a second name beside the
# first, or the first name moved (then no name the file had before the call is left to compare with)
NAMINGS = {"link": "os.link", "rename": "os.rename"}


@pytest.mark.parametrize("naming", NAMINGS)
def test_a_new_name_for_a_mapped_file_does_not_outlive_the_call(tmp_path: Path, naming: str) -> None:
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here")
    tag = uuid.uuid4().hex[:12]
    held, leak = Path(f"/dev/shm/rebench-adv-held-{tag}"), Path(f"/dev/shm/rebench-adv-leak-{tag}")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(held)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        worker = (f"import os\n{NAMINGS[naming]}({str(held)!r}, {str(leak)!r})\n"
                  f"with open({str(leak)!r}, 'r+b') as f:\n    f.write(b'held-out rows')\n")
        child = ConfinedChild({}, worker, [], cwd=str(tmp_path))
        child.proc.wait(timeout=30)
        assert leak.exists(), "the attack did not run"
        child.close()
        assert not leak.exists(), "a name the submitted code gave a mapped file outlived the call"
        if naming == "link":
            assert held.exists(), "the long-lived process's own file was removed"
    finally:
        holder.communicate(timeout=10)
        held.unlink(missing_ok=True)
        leak.unlink(missing_ok=True)
