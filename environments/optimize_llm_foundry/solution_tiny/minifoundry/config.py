"""finetune.yaml plus `dotted.key=value` overrides from the command line (as LLM Foundry's
OmegaConf configs take them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load(path: str | Path, overrides: list[str]) -> dict[str, Any]:
    config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"bad override {item!r}: use key=value")
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return resolve(config, config)


def resolve(node: Any, root: dict[str, Any]) -> Any:
    """Replace `${name}` strings by the top-level value `name` (variables, as OmegaConf does)."""
    if isinstance(node, dict):
        return {key: resolve(value, root) for key, value in node.items()}
    if isinstance(node, list):
        return [resolve(value, root) for value in node]
    if isinstance(node, str) and node.startswith("${") and node.endswith("}"):
        return resolve(root[node[2:-1]], root)
    return node
