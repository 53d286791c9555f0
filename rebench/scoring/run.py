"""Running one score call through the in-sandbox helper and reading its JSON result."""

from __future__ import annotations

import hmac
import json
import secrets
import uuid

from pydantic import ValidationError

from rebench.environments.install import PARAMS_FILE, SCORING_DIR
from rebench.sandbox.base import Sandbox
from rebench.scoring.result import ScoreResult

SCORE_LOG = "score.log"
HELPER_GRACE_S = 30.0


async def run_scoring(sandbox: Sandbox, timeout_s: float) -> ScoreResult:
    """Score the sandbox's current solution. Never raises for a bad solution: an
    invalid or crashed solution is a ScoreResult with raw None.

    The helper gets a fresh nonce on stdin and writes it into its result; a result
    without it was not written by this call (a forgery, or an old file) and counts as
    no result."""
    paths = sandbox.paths
    nonce = secrets.token_hex(16)
    out = paths.in_protected("results", f"{uuid.uuid4().hex}.json")
    await sandbox.exec(["mkdir", "-p", paths.in_protected("results")], user="root", timeout=30)
    result = await sandbox.exec(
        [
            paths.python, paths.helper,
            "--program", paths.in_protected(SCORING_DIR, "score.py"),
            "--params", paths.in_protected(PARAMS_FILE),
            "--out", out,
            "--log", paths.in_protected(SCORE_LOG),
            "--timeout", str(timeout_s),
            "--nonce-stdin",
        ],
        user="scorer",
        cwd=paths.home,
        timeout=timeout_s + HELPER_GRACE_S,
        stdin=(nonce + "\n").encode(),
    )
    try:
        document = json.loads(await sandbox.read_file(out))
        if not isinstance(document, dict) or not hmac.compare_digest(str(document.pop("nonce", "")), nonce):
            raise ValueError("the result file was not written by this scoring call")
        return ScoreResult.model_validate(document)
    except (OSError, ValueError, ValidationError) as exc:
        reason = "scoring timed out" if result.timed_out else f"scoring produced no result ({type(exc).__name__})"
        if isinstance(exc, ValueError) and "not written by this scoring call" in str(exc):
            reason = str(exc)
        return ScoreResult(
            raw=None,
            message={"error": reason},
            details={"stdout": result.stdout[-2000:], "stderr": result.stderr[-2000:]},
        )
