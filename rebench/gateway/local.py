"""The environment's own model (`upstream = "local/NAME"`): the contract it implements, and loading it.

An environment folder holds a file (`[profiles.P.gateway] local_model`, e.g. `model.py`) defining
`load(assets: Path) -> LocalModel`; the harness imports it in its own process and calls `load` on the
profile's built assets folder (rebench.environments.build.assets_dir), which never enters the sandbox.
`generate` runs in a worker thread, with a seed the gateway derives from the request itself
(`request_seed`), so an answer does not depend on the order concurrent requests arrive in.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rebench.errors import ConfigError
from rebench.kit.completion import LocalCompletion


@runtime_checkable
class LocalModel(Protocol):
    """What an environment's local model gives the gateway."""

    name: str

    def count_tokens(self, text: str) -> int: ...

    def chat_prompt(self, messages: list[dict[str, Any]]) -> str:
        """OpenAI chat messages -> the model's prompt text."""
        ...

    def generate(self, prompt: str, *, n: int, temperature: float, max_tokens: int,
                 seed: int) -> list[LocalCompletion]:
        """`n` samples; deterministic for a given (prompt, n, temperature, max_tokens, seed)."""
        ...


def request_seed(body: dict[str, Any]) -> int:
    """A 63-bit seed from the request's canonical JSON (the caller's own `seed` field included):
    the same request gets the same answer, whatever else runs at the same time."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return int.from_bytes(hashlib.sha256(canonical.encode()).digest()[:8], "big") >> 1


def load_local_model(env_root: Path, filename: str, assets: Path | None) -> LocalModel:
    """Import `env_root/filename` and call its `load(assets)` (`assets`: the profile's built assets
    folder; for an environment without build.py, its own folder); ConfigError saying what is wrong.

    The environment folder is on sys.path while the file is imported, so it may import its
    neighbours (a tokenizer module next to it)."""
    path = env_root / filename
    if not path.is_file():
        raise ConfigError(f"{env_root}: the gateway's local_model file {filename!r} is missing")
    if assets is not None and not assets.is_dir():
        raise ConfigError(f"{env_root.name}: the local model needs the profile's built assets "
                          f"({assets}); run `rebench envs build {env_root.name}`")
    module_name = f"rebench_local_model_{env_root.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    added = str(env_root) not in sys.path
    if added:
        sys.path.insert(0, str(env_root))
    sys.modules[module_name] = module  # dataclasses and pickling look their module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    finally:
        if added:
            sys.path.remove(str(env_root))
    load = getattr(module, "load", None)
    if not callable(load):
        raise ConfigError(f"{path} defines no load(assets) function")
    model = load(assets if assets is not None else env_root)
    missing = [name for name in ("name", "count_tokens", "chat_prompt", "generate") if not hasattr(model, name)]
    if missing:
        raise ConfigError(f"{path}: load() returned {type(model).__name__}, which lacks {', '.join(missing)}")
    return model
