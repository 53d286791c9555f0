"""The result file: the harness takes a score only from a result its own scoring call wrote.

Runs on the local backend (real subprocesses, the real helper): the binding to the call (a
nonce the helper reads on stdin and writes into the result) is the same on every backend;
on Docker, who may write the file at all is covered by test_scoring_integrity.py."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from rebench.sandbox.base import SandboxSpec
from rebench.sandbox.local import LocalSandbox
from rebench.scoring.run import run_scoring

pytestmark = pytest.mark.adversarial

PROGRAM = 'def score(ctx):\n    return {"raw": 0.25, "message": {"checked": True}}\n'
FORGER = '''import json, sys
out = sys.argv[sys.argv.index("--out") + 1]
with open(out, "w") as handle:
    json.dump({"raw": 9.7, "message": {}, "details": {}}, handle)
'''


def score_with(tmp_path: Path, forger: bool) -> object:
    async def go() -> object:
        sandbox = LocalSandbox(SandboxSpec(attempt_id=1, environment="t", profile="tiny"), tmp_path / "a",
                               sys.executable)
        await sandbox.start()
        protected = Path(sandbox.paths.protected)
        (protected / "scoring").mkdir()
        (protected / "scoring" / "score.py").write_text(PROGRAM)
        (protected / "params.json").write_text(json.dumps({"solution": sandbox.paths.solution}))
        if forger:  # someone else writes the result file the call will read
            sandbox.paths.helper = str(tmp_path / "forger.py")
            Path(sandbox.paths.helper).write_text(FORGER)
        try:
            return await run_scoring(sandbox, 30)
        finally:
            await sandbox.stop()

    return asyncio.run(go())


def test_a_result_the_scoring_call_did_not_write_is_rejected(tmp_path: Path) -> None:
    forged = score_with(tmp_path / "forged", forger=True)
    assert forged.raw is None and not forged.valid  # type: ignore[attr-defined]
    assert "not written by this scoring call" in forged.message["error"]  # type: ignore[attr-defined]


def test_the_helpers_own_result_is_taken(tmp_path: Path) -> None:
    honest = score_with(tmp_path / "honest", forger=False)
    assert honest.raw == 0.25 and honest.message == {"checked": True}  # type: ignore[attr-defined]
