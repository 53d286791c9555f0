"""The scoring context of `python score.py` run by hand (stdlib only).

The harness gives `score(ctx)` the profile's params and the sandbox's folders. Run by hand
(the agent may, as in RE-Bench), a scorer builds the same from the files the build left in
the agent's home: profile_params.json, overlaid by $REBENCH_SCORE_PARAMS when that names a
file, with the folders from $REBENCH_HOME and $REBENCH_SOLUTION.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def direct_context(script: str) -> dict[str, Any]:
    """The ctx for the scorer at path `script` run directly."""
    home = Path(os.environ.get("REBENCH_HOME") or Path(script).resolve().parent)
    ctx: dict[str, Any] = json.loads((home / "profile_params.json").read_text(encoding="utf-8"))
    params_file = os.environ.get("REBENCH_SCORE_PARAMS")
    if params_file and os.path.exists(params_file):
        ctx.update(json.loads(Path(params_file).read_text(encoding="utf-8")))
    ctx.setdefault("home", str(home))
    ctx.setdefault("solution", os.environ.get("REBENCH_SOLUTION") or str(home / "solution"))
    ctx.setdefault("protected", "/protected")
    return ctx
