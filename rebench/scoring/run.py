"""Running one score call through the in-sandbox helper and reading its JSON result."""

from __future__ import annotations

import contextlib
import hmac
import json
import secrets
import uuid
from typing import Protocol

from pydantic import ValidationError

from rebench.environments.install import PARAMS_FILE, SCORING_DIR
from rebench.sandbox.base import Sandbox
from rebench.scoring.result import ScoreResult

SCORE_LOG = "score.log"
HELPER_GRACE_S = 30.0


class CallTokens(Protocol):
    """Mints a model-gateway token for one score call (rebench.gateway.AttemptGateway)."""

    def open_call_token(self) -> str: ...

    def close_call_token(self, token: str) -> None: ...


async def run_scoring(sandbox: Sandbox, timeout_s: float, tokens: CallTokens | None = None,
                      params: str = PARAMS_FILE) -> ScoreResult:
    """Score the sandbox's current solution. Never raises for a bad solution: an
    invalid or crashed solution is a ScoreResult with raw None.

    The helper gets a fresh nonce on stdin and writes it into its result; a result
    without it was not written by this call (a forgery, or an old file) and counts as
    no result. With `tokens` (an environment with a model gateway) it also gets a gateway
    token valid for this call only, for the submitted code the scorer runs: revoked when the
    call ends, so a copy the code keeps is useless after it. `params`: the protected params file
    to score with (the held-out split's, rebench.environments.install.FINAL_PARAMS_FILE)."""
    call_token = tokens.open_call_token() if tokens is not None else ""
    try:
        return await _run_scoring(sandbox, timeout_s, call_token, params)
    finally:
        if tokens is not None:
            with contextlib.suppress(Exception):
                tokens.close_call_token(call_token)


async def _run_scoring(sandbox: Sandbox, timeout_s: float, call_token: str, params: str) -> ScoreResult:
    paths = sandbox.paths
    nonce = secrets.token_hex(16)
    out = paths.in_protected("results", f"{uuid.uuid4().hex}.json")
    await sandbox.exec(["mkdir", "-p", paths.in_protected("results")], user="root", timeout=30)
    result = await sandbox.exec(
        [
            paths.python, paths.helper,
            "--program", paths.in_protected(SCORING_DIR, "score.py"),
            "--params", paths.in_protected(params),
            "--out", out,
            "--log", paths.in_protected(SCORE_LOG),
            "--timeout", str(timeout_s),
            "--nonce-stdin",
        ],
        user="scorer",
        cwd=paths.home,
        timeout=timeout_s + HELPER_GRACE_S,
        stdin=(nonce + "\n" + call_token + "\n").encode(),
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
