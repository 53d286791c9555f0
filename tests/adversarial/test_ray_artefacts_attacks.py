"""A hostile agent's files on a Ray worker, on their way to the head (rebench.scheduler.ray_artefacts).

The agent's solution holds links to a secret file of the worker and to /etc/passwd, a link climbing
out of every folder, a FIFO and files with hostile names; and, as the local backend lets it (it runs
as the harness's user), it plants links in the worker's own outgoing folder: into the attempt's
snapshot folder, and a link to /etc in place of the attempt's agent folder. The head must get
nothing from outside the attempt's folder: no link that leads out of its snapshot folder, no byte
of the secret or of /etc/passwd, nothing written outside it; what it refused is in the attempt's
record. The cluster is tests/test_ray_artefacts.py's (workers in mount namespaces of their own).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.test_ray_artefacts import campaign, hidden_site, rows

pytestmark = [pytest.mark.slow]

SECRET = "worker-secret-7f3a9c"


def test_links_fifos_hostile_names_and_planted_links_on_the_worker_reach_nothing_on_the_head(
        tmp_path: Path) -> None:
    with hidden_site(tmp_path) as site:
        secret = site.base / "worker-secret.txt"
        secret.write_text(SECRET)
        outgoing = " ".join(f"{folder}/rebench-ray-*/snapshots" for folder in site.node_tmp)
        hostile = ("ln -s /etc/passwd leak; ln -s " + str(secret) + " leak2; ln -s ../../../../../../../.. up; "
                   "ln -s . self; mkfifo pipe; printf x > \"$(printf '..\\nx')\"; printf y > ' -rf'; "
                   "printf z > \"$(printf '\\033[31mred')\"")
        plant = (f"for s in {outgoing}; do for a in $s/attempt-*[0-9]; do [ -d \"$a\" ] || continue; "
                 f"ln -s /etc/passwd \"$a/planted\"; ln -s {secret} \"$a/score-001/planted2\"; "
                 "ln -s /etc \"$a-agent\"; done; done; true")
        db = site.head / "attack.db"
        done = campaign(site, db, "rescore", [
            {"write_file": {"path": "value.txt", "content": "5"}}, {"bash": hostile}, {"score": {}},
            {"bash": plant}, {"write_file": {"path": "value.txt", "content": "6"}}, {"score": {}}], k=1)
        assert done.returncode == 0, done.stderr[-3000:]
        assert rows(db, "select status from attempts") == [("done",)]

        snapshots = site.head / "attack.db-snapshots"
        final = snapshots / "attempt-1" / "final"
        assert (final / "value.txt").read_text() == "6"
        assert (final / "..\nx").read_text() == "x" and (final / " -rf").read_text() == "y"  # names are data
        real = os.path.realpath(snapshots)
        for folder, dirs, files in os.walk(snapshots):
            for name in dirs + files:
                path = Path(folder) / name
                info = os.lstat(path)
                assert not stat.S_ISFIFO(info.st_mode), path
                if stat.S_ISLNK(info.st_mode):
                    assert os.path.realpath(path).startswith(real + os.sep), (path, os.readlink(path))
                elif stat.S_ISREG(info.st_mode):
                    text = path.read_bytes()
                    assert SECRET.encode() not in text and b"root:x:0:0" not in text, path
        assert sorted(p.name for p in snapshots.iterdir()) == ["attempt-1"]  # no agent folder, no staging
        assert not list(snapshots.rglob("planted*"))
        assert {p.name for p in site.head.iterdir()} <= {"attack.db", "attack.db-wal", "attack.db-shm",
                                                         "attack.db-snapshots"}

        refused = [json.loads(d)["data"]["refused"] for (d,) in rows(
            db, "select data from events where kind = 'note' and data like '%were not written%'")]
        assert len(refused) == 1 and any("planted" in line for line in refused[0]), refused
        assert any("attempt-1-agent" in line for line in refused[0]), refused
