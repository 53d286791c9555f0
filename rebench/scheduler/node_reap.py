"""What a lost Ray worker left on its node's Docker engine, removed by the node itself.

When a worker node dies mid-attempt, the head cannot reach that node's engine, and the attempt's
own cleanup never ran. A running container ends itself once its harness's attach closes (its exec
server reads end-of-file and exits, and the engine removes it), but one the worker had made and not
yet started stays for good, with its agent's disk mounted (and, under `--network full`, its network
and host rules). So the first attempt a node runs (under a Ray node id of its own: a node that comes
back is a new one) first removes, like `rebench gc`, the containers whose owner process is dead
on this host. A container whose owner still runs (an attempt of another node on the same engine, or
of a harness outside Ray) is kept; so is every human attempt's.
"""

from __future__ import annotations

import os
import re

from rebench.paths import cache_dir
from rebench.scheduler.resume import remove_orphan_containers

MARKERS = "ray-nodes"
"""Folder of the node's cache (REBENCH_CACHE of its `ray start`) holding a file per node id reaped."""


def reap_once_on_node(node_id: str, backend: str) -> list[str] | None:
    """Remove dead owners' containers on this node's engine, the first time a Docker attempt of
    Ray node `node_id` starts here; the names removed, or None when this node had already reaped
    (or the attempt is not on Docker). Best effort: no engine, nothing removed."""
    if backend != "docker" or not re.fullmatch(r"[0-9a-fA-F]{8,128}", node_id):
        return None
    folder = cache_dir() / MARKERS
    folder.mkdir(parents=True, exist_ok=True)
    try:  # created by one task only, however many start on the node at once
        os.close(os.open(folder / node_id, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return None
    return remove_orphan_containers()
