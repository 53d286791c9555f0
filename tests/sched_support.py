"""Shared by the scheduler tests: a fixture environment that needs GPUs, replay scripts, lease rows."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path

import yaml

GPU_PROFILE = """
[profiles.gpu]
description = "The counter on a fake GPU: the scheduler leases a device for each attempt."
resources = { gpus = 1, cpus = 1, memory_gb = 1 }
direction = "higher"
final_score = "best"
score_timeout_s = 5
anchors = { start = 1.0, reference = 11.0, source = "by construction" }
params = { secret_file = "answer.txt" }
"""


def add_gpu_profile(envs: Path) -> None:
    """The counter fixture gets a `gpu` profile needing one GPU (a fake inventory stands in for it)."""
    toml = envs / "counter" / "environment.toml"
    toml.write_text(toml.read_text() + GPU_PROFILE)


def replay_script(path: Path, value: int, sleep_s: float) -> Path:
    """Write a value, score it, say which GPUs the sandbox sees, then sleep (`running` meanwhile)."""
    actions = [{"write_file": {"path": "value.txt", "content": str(value)}}, {"score": {}},
               {"bash": "echo gpus=${CUDA_VISIBLE_DEVICES:-none}"}, {"sleep": sleep_s}]
    path.write_text(yaml.safe_dump({"actions": actions}))
    return path


def rows(db: Path, query: str, *args: object) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query, args).fetchall()


def when(text: object) -> datetime:
    return datetime.fromisoformat(str(text))
