"""The held-out final score (a profile's `final_split`, docs/heldout.md).

Intermediate score calls use the profile's hidden split, and an agent may call them as often as
it likes: a solution can end up fitted to that split (RE-Bench's paper saw GPT-2 QA scores fall
from 88% to 69% for one agent when re-scored on fresh data). After the attempt, with the clock
stopped and the agent's processes killed, the solution it ended with is scored once on a second
hidden split no score call used, with the scorer's params for it (`params-final.json` in the
protected folder, rebench.environments.install). The result is a score row of kind `heldout`;
reports normalize it with the split's own anchors (`split_anchors`) and set it beside the best
intermediate score.
"""

from __future__ import annotations

from typing import Any, Protocol

from rebench.environments.install import FINAL_PARAMS_FILE
from rebench.environments.metadata import FinalSplit, Profile
from rebench.sandbox.base import Sandbox
from rebench.scoring.normalize import ResolvedAnchors
from rebench.scoring.result import ScoreResult
from rebench.scoring.run import CallTokens, run_scoring
from rebench.store.models import ScoreKind


class ScoreRecorder(Protocol):
    """What recording a held-out score needs of the attempt's recorder (rebench.context.AttemptRecorder)."""

    def event(self, kind: str, **data: Any) -> None: ...

    def score(self, result: ScoreResult, kind: ScoreKind, extra: dict[str, Any] | None = None) -> int: ...


async def score_heldout(sandbox: Sandbox, profile: Profile, record: ScoreRecorder, *, skip: str | None,
                        tokens: CallTokens | None = None) -> str:
    """Score the solution folder on the held-out split and record it (a `note` when `skip` says
    why not); what happened, in one line."""
    assert profile.final_split is not None
    if skip is not None:
        record.event("note", message=f"no held-out final score: {skip}")
        return f"skipped: {skip}"
    result: ScoreResult = await run_scoring(sandbox, profile.score_timeout_s, tokens, FINAL_PARAMS_FILE)
    record.score(result, ScoreKind.HELDOUT, {"split": "final"})
    return f"held-out final {result.raw}"


def heldout_skip(status: str, error_source: str | None, kill_error: str | None) -> str | None:
    """Why the held-out final is not taken (None: it is): not for an interrupted attempt, a failed
    sandbox, or an agent whose processes could not be stopped (they could change the solution)."""
    if status == "interrupted":
        return "the attempt was interrupted"
    if error_source == "infrastructure":
        return "the sandbox failed"
    if kill_error is not None:
        return f"the agent's processes could not be stopped ({kill_error})"
    return None


def split_anchors(in_force: ResolvedAnchors, split: FinalSplit) -> ResolvedAnchors:
    """The anchors a held-out final is normalized with: those resolved beside the anchors in force
    (rebench.calibration.resolve_anchors: calibrated here, else declared), else the split's declared
    ones (anchors recorded before held-out anchors were resolved, or measured in a re-scoring window)."""
    if in_force.heldout is not None:
        return in_force.heldout
    return ResolvedAnchors(start=split.anchors.start, reference=split.anchors.reference, kind="declared")
