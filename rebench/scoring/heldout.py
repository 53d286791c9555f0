"""The held-out final score (a profile's `final_split`, docs/heldout.md).

Intermediate score calls use the profile's hidden split, and an agent may call them as often as
it likes: a solution can end up fitted to that split (RE-Bench's paper saw GPT-2 QA scores fall
from 88% to 69% for one agent when re-scored on fresh data). After the attempt, with the clock
stopped and the agent's processes killed, its solution is scored once on a second hidden split no
score call used, with the scorer's params for it (`params-final.json` in the protected folder,
rebench.environments.install). The result is a score row of kind `heldout`; reports normalize it
with the split's own anchors (`split_anchors`) and set it beside the best intermediate score.

Which solution follows the final rule (`heldout_solution`): under `best` the attempt's score is its
best score call, so the held-out final scores that call's solution, laid back from the snapshot taken
at the call (`snapshots_at_calls`), not whatever the agent left after it; where that snapshot was not
kept whole it scores the final solution and says why. Under the other rules it scores the solution the
agent ended with. The row's details name the solution (`HeldoutSolution`) for reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from rebench.environments.install import FINAL_PARAMS_FILE
from rebench.environments.metadata import FinalSplit, Profile
from rebench.sandbox.base import Sandbox
from rebench.scoring.normalize import ResolvedAnchors, final_raw_score, is_valid
from rebench.scoring.rescore import Direction, ScoreSnapshot, restore_snapshot
from rebench.scoring.result import ScoreResult
from rebench.scoring.run import CallTokens, run_scoring
from rebench.store.models import ScoreKind


class ScoreRecorder(Protocol):
    """What recording a held-out score needs of the attempt's recorder (rebench.context.AttemptRecorder)."""

    def event(self, kind: str, **data: Any) -> None: ...

    def score(self, result: ScoreResult, kind: ScoreKind, extra: dict[str, Any] | None = None) -> int: ...


def snapshots_at_calls(rule: str, profile: Profile) -> bool:
    """Whether the solution is snapshotted at each score call (rebench.scoring.rescore.ScoreSnapshots):
    under `rescore_best`, to re-score the best ones; under `best` on a profile with a held-out split, to
    score the best one on it. Not where the profile's `rescore.snapshot_each_score` is false (large
    solutions, where a copy per call costs too much)."""
    wanted = rule == "rescore_best" or (rule == "best" and profile.final_split is not None)
    return wanted and profile.rescore.snapshot_each_score


class HeldoutSolution(BaseModel):
    """Which solution a held-out final scored; its score row's details carry these fields."""

    solution: Literal["best_call", "final"]
    """`best_call`: the solution of the score call the `best` rule picked; `final`: the one the agent ended with."""
    score_id: int | None = None
    """That call's intermediate score event (best_call only)."""
    call: int | None = None
    """That call's number among the attempt's score calls, from 1 (best_call only)."""
    snapshot: str | None = None
    """The host folder it was restored from: the snapshot taken at that call (best_call only)."""
    fallback: str | None = None
    """Under `best`, why the final solution was scored instead of the best call's."""

    def describe(self) -> str:
        """One line for `attempts show`."""
        if self.solution == "best_call":
            return f"held-out final scored the solution of score call {self.call} (the best)"
        if self.fallback is not None:
            return f"held-out final scored the final solution, not the best call's: {self.fallback}"
        return "held-out final scored the final solution"


def heldout_solution(rule: str, calls: Sequence[tuple[int, float | None]],
                     snapshots: Sequence[ScoreSnapshot] | None, direction: Direction,
                     no_snapshots: str = "none were taken") -> HeldoutSolution:
    """The solution the held-out final scores (module docstring). `calls` are the attempt's intermediate
    score events (id, raw; in order), `snapshots` those taken at its score calls (None: none were taken,
    `no_snapshots` says why). Among calls tied for the best score the first one kept whole is taken."""
    if rule != "best":
        return HeldoutSolution(solution="final")
    best = final_raw_score([raw for _, raw in calls], rule="best", direction=direction)
    if best is None:
        return HeldoutSolution(solution="final", fallback="no score call was valid, so the rule picked none")
    tied = [(number, score_id) for number, (score_id, raw) in enumerate(calls, 1)
            if is_valid(raw) and raw == best]
    if snapshots is None:
        return HeldoutSolution(solution="final", fallback=f"no snapshots at score calls ({no_snapshots})")
    kept = {s.score_id: s for s in snapshots if s.score_id is not None}
    for number, score_id in tied:
        snapshot = kept.get(score_id)
        if snapshot is not None and snapshot.sha256 is not None and snapshot.path:
            return HeldoutSolution(solution="best_call", score_id=score_id, call=number, snapshot=snapshot.path)
    number, score_id = tied[0]
    snapshot = kept.get(score_id)
    why = (f"the snapshot of score call {number} (the best, raw {best:g}) was cut by the snapshot budget "
           f"({snapshot.path}), so it is not the solution that was scored" if snapshot is not None
           else f"score call {number} (the best, raw {best:g}) has no snapshot (taking it failed)")
    return HeldoutSolution(solution="final", fallback=why)


async def score_heldout(sandbox: Sandbox, profile: Profile, record: ScoreRecorder, *, skip: str | None,
                        tokens: CallTokens | None = None, solution: HeldoutSolution | None = None) -> str:
    """Score `solution` (default: the solution folder as the agent left it) on the held-out split
    and record it, naming the solution in the row (a `note` when `skip` says why not, or when the
    best call's solution could not be laid back); what happened, in one line."""
    assert profile.final_split is not None
    if skip is not None:
        record.event("note", message=f"no held-out final score: {skip}")
        return f"skipped: {skip}"
    solution = solution or HeldoutSolution(solution="final")
    if solution.snapshot is not None:  # the agent's processes are dead: nothing changes the folder after this
        try:
            error = await restore_snapshot(sandbox, Path(solution.snapshot))
        except Exception as exc:  # a copy that failed half-way: the folder holds neither solution
            error = f"{type(exc).__name__}: {exc}"
        if error is not None:
            record.event("note", message=f"no held-out final score: the solution of score call {solution.call} "
                         f"could not be restored ({error})")
            return f"skipped: {error}"
    elif solution.fallback is not None:
        record.event("note", message=f"held-out final on the final solution: {solution.fallback}")
    result: ScoreResult = await run_scoring(sandbox, profile.score_timeout_s, tokens, FINAL_PARAMS_FILE)
    record.score(result, ScoreKind.HELDOUT, {"split": "final", **solution.model_dump()})
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
