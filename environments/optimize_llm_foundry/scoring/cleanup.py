"""Runs as the user that ran finetune.sh, after it (score.py passes this file's source to
`python -P -c` through the helper's confinement), in one of two modes.

    python -P -c SOURCE READ_FD WRITE_FD open FOLDER
    python -P -c SOURCE READ_FD WRITE_FD clean SCRATCH SCORER_UID SWEEP_DIR...

`open` makes FOLDER (trained_model/) and the regular files directly in it readable by others, so
the scorer can read weights that were written private (transformers saves them with mode 0600);
links are left alone. `clean`: the run saw the hidden training file, so nothing it wrote may
outlive the scoring call: what this user can remove in the scratch folder goes (the scorer then
removes the rest, its own files), and where the run had its own user (not the scorer's: the Docker backend's
`subject`), so does everything that user owns in the SWEEP_DIRs (the world-writable folders and the
agent's home), where it could have left a copy for the agent.
"""

import contextlib
import os
import shutil
import stat
import sys

from rebench.kit.confined import Channel


def _remove(path):
    try:
        info = os.lstat(path)
    except OSError:
        return
    if stat.S_ISDIR(info.st_mode):
        if info.st_uid == os.getuid():
            os.chmod(path, 0o700)
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _sweep(folder, uid):
    """Everything `uid` owns beneath `folder` (not following links)."""
    removed = 0
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            try:
                owner = os.lstat(path).st_uid
            except OSError:
                continue
            if owner == uid:
                _remove(path)
                removed += 1
                if name in dirs:
                    dirs.remove(name)
    return removed


def _open(folder):
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return 0
        os.chmod(folder, 0o755)
        names = os.listdir(folder)
    except OSError:
        return 0
    opened = 0
    for name in names:
        path = os.path.join(folder, name)
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(path).st_mode):
                os.chmod(path, 0o644)
                opened += 1
    return opened


def main():
    channel = Channel(sys.argv)
    mode, *args = channel.args
    if mode == "open":
        channel.send({"opened": _open(args[0])})
        return
    scratch, scorer_uid, *sweep = args
    for name in os.listdir(scratch):
        _remove(os.path.join(scratch, name))
    removed = 0
    if os.getuid() != int(scorer_uid):
        for folder in sweep:
            removed += _sweep(folder, os.getuid())
    channel.send({"removed": removed})


if __name__ == "__main__":
    main()
