"""Running one score call through the in-sandbox helper and reading its JSON result."""

from __future__ import annotations

import json
import uuid

from pydantic import ValidationError

from rebench.environments.install import PARAMS_FILE
from rebench.sandbox.base import Sandbox
from rebench.scoring.result import ScoreResult

SCORE_LOG = "score.log"
HELPER_GRACE_S = 30.0


async def run_scoring(sandbox: Sandbox, timeout_s: float) -> ScoreResult:
    """Score the sandbox's current solution. Never raises for a bad solution: an
    invalid or crashed solution is a ScoreResult with raw None."""
    paths = sandbox.paths
    out = paths.in_protected("results", f"{uuid.uuid4().hex}.json")
    await sandbox.exec(["mkdir", "-p", paths.in_protected("results")], user="root", timeout=30)
    result = await sandbox.exec(
        [
            paths.python, paths.helper,
            "--program", paths.in_home("score.py"),
            "--params", paths.in_protected(PARAMS_FILE),
            "--out", out,
            "--log", paths.in_protected(SCORE_LOG),
            "--timeout", str(timeout_s),
        ],
        user="scorer",
        cwd=paths.home,
        timeout=timeout_s + HELPER_GRACE_S,
    )
    try:
        return ScoreResult.model_validate(json.loads(await sandbox.read_file(out)))
    except (OSError, ValueError, ValidationError) as exc:
        reason = "scoring timed out" if result.timed_out else f"scoring produced no result ({type(exc).__name__})"
        return ScoreResult(
            raw=None,
            message={"error": reason},
            details={"stdout": result.stdout[-2000:], "stderr": result.stderr[-2000:]},
        )
