"""What an environment's local model returns to the gateway for each sample (stdlib only).

The model file (`local_model` in a profile's gateway settings) is loaded by the gateway in the
harness's process, but the environment's build and benchmarks import it too, in virtualenvs
that have the kit and not the rest of the harness: so the type lives here, and
rebench.gateway.local re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class LocalCompletion:
    """One sampled continuation."""

    text: str
    output_tokens: int
    finish_reason: Literal["stop", "length"] = "stop"
