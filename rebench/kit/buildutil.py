"""Helpers every environment's build.py uses: reading the profile's params (as the harness
passes them, else from environment.toml), laying out DIR/home, DIR/workspace, DIR/protected, and writing the
tiny corpus.

Part of the environment kit's build-time code (it may use NumPy).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import numpy as np


def load_file(name: str, path: Path, *, reuse: bool = True) -> ModuleType:
    """Import the file `path` as module `name` (registered in sys.modules, which dataclasses and
    pickling need). Environment folders are not packages: build scripts, benchmarks and tests load
    their neighbours by path. With `reuse`, a module already loaded under `name` is returned."""
    if reuse and name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--profile", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--assets", type=Path, help="the operator's files the profile declares (the harness passes it)")
    return parser.parse_args()


def need_assets(args: argparse.Namespace) -> Path:
    """The --assets folder; a profile with declared assets is built through `rebench envs build`."""
    if args.assets is None or not args.assets.is_dir():
        raise SystemExit(f"profile {args.profile!r} needs the operator's assets: "
                         f"run `rebench envs build ENV --profile {args.profile} --asset NAME=PATH ...`")
    return args.assets


BUILD_PARAMS_ENV = "REBENCH_BUILD_PARAMS"
"""Names the JSON file with the profile's params as the harness builds it (`rebench run --env-param`
values included): {"profile": P, "params": {...}}."""


def profile_params(env_dir: Path, profile: str) -> dict:
    """The profile's params: those the harness passes for this build (`$REBENCH_BUILD_PARAMS`), else
    the [profiles.P.params] table of the environment; a one-line error for an unknown profile."""
    given = os.environ.get(BUILD_PARAMS_ENV)
    if given:
        payload = json.loads(Path(given).read_text(encoding="utf-8"))
        if payload.get("profile") != profile:
            raise SystemExit(f"{BUILD_PARAMS_ENV} names params of profile {payload.get('profile')!r}, "
                             f"not of {profile!r}")
        return dict(payload["params"])
    meta = tomllib.loads((env_dir / "environment.toml").read_text(encoding="utf-8"))
    profiles = meta.get("profiles", {})
    if profile not in profiles:
        raise SystemExit(f"unknown profile {profile!r}; allowed: {', '.join(sorted(profiles))}")
    return dict(profiles[profile].get("params", {}))


def layout(out: Path) -> tuple[Path, Path, Path]:
    """Create and return DIR/home, DIR/workspace, DIR/protected."""
    parts = tuple(out / name for name in ("home", "workspace", "protected"))
    for part in parts:
        part.mkdir(parents=True, exist_ok=True)
    return parts  # type: ignore[return-value]


def write_params(home: Path, profile: str, params: dict) -> None:
    """The profile's params for `python score.py` run by hand (the harness passes its own)."""
    payload = {"profile": profile, **params}
    (home / "profile_params.json").write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n",
                                              encoding="utf-8")


def seed_everything(seed: int, threads: int = 1) -> None:
    """Seeds and one thread, so a build gives the same bytes on every machine."""
    import torch

    os.environ.setdefault("PYTHONHASHSEED", "0")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
