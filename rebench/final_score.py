"""How an attempt's final score is taken once the agent has ended: the best solutions re-scored where
the profile's rule asks (rebench.scoring.rescore), which solution a held-out final scores (under `best`,
the best call's), then the final row: the score by the run's rule or the re-scored median, normalized
with the anchors that apply (the re-scoring window's where it measured them), and the attempt's status
and times.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import select

from rebench.attempt_outcome import AttemptOutcome
from rebench.calibration import resolve_anchors
from rebench.clock import AttemptClock
from rebench.context import AttemptRecorder
from rebench.environments.build import assets_dir
from rebench.environments.metadata import Profile
from rebench.environments.registry import Environment
from rebench.gateway.attempt import AttemptGateway
from rebench.sandbox.base import Sandbox
from rebench.scoring.heldout import HeldoutSolution, heldout_solution
from rebench.scoring.normalize import final_raw_score, normalize
from rebench.scoring.rescore import (
    RULE_ONLY,
    FinalRule,
    RescoreSummary,
    ScoreSnapshots,
    final_candidate,
    rescore,
)
from rebench.scoring.window import anchor_solutions, final_anchors, uses_window_anchors
from rebench.store.db import Store
from rebench.store.models import (
    Attempt,
    AttemptStatus,
    ErrorSource,
    ScoreEvent,
    ScoreKind,
)


def last_valid_score(store: Store, attempt_id: int) -> ScoreEvent | None:
    """The attempt's last valid intermediate score (re-scored when no snapshot was taken at score calls)."""
    with store.session() as session:
        return session.scalars(select(ScoreEvent).where(
            ScoreEvent.attempt_id == attempt_id, ScoreEvent.kind == ScoreKind.INTERMEDIATE,
            ScoreEvent.valid.is_(True)).order_by(ScoreEvent.id.desc())).first()


def heldout_solution_of(store: Store, attempt_id: int, rule: FinalRule, profile: Profile,
                        score_snapshots: ScoreSnapshots | None) -> HeldoutSolution:
    """Which solution the attempt's held-out final scores: under `best`, its best call's
    (rebench.scoring.heldout.heldout_solution), from the snapshots taken at its score calls."""
    with store.session() as session:
        calls = [(e.id, e.raw if e.valid else None) for e in session.scalars(select(ScoreEvent).where(
            ScoreEvent.attempt_id == attempt_id, ScoreEvent.kind == ScoreKind.INTERMEDIATE).order_by(ScoreEvent.id))]
    return heldout_solution(rule, calls, None if score_snapshots is None else score_snapshots.taken,
                            profile.direction, no_snapshots="the profile's rescore.snapshot_each_score is false")


async def rescore_attempt(store: Store, env: Environment, rule_of: Callable[[Profile], FinalRule],
                          progress: Callable[[int, str], None], attempt_id: int, outcome: AttemptOutcome,
                          sandbox: Sandbox, recorder: AttemptRecorder, score_snapshots: ScoreSnapshots | None,
                          final_snapshot: str | None, kill_error: str | None,
                          tokens: AttemptGateway | None = None) -> RescoreSummary | None:
    """Re-score the best snapshots, unless the attempt was interrupted, its sandbox is gone or
    the agent's processes could not be stopped (then None: the row keeps RE-Bench's rule, and
    a note says why). Without snapshots at score
    calls (`snapshot_each_score = false`) the solution the agent ended with is re-scored."""
    why = None
    if outcome.status == AttemptStatus.INTERRUPTED:
        why = "the attempt was interrupted"
    elif outcome.error_source == ErrorSource.INFRASTRUCTURE or not await sandbox.alive():
        why = "the sandbox failed"
    elif kill_error is not None:
        why = f"the agent's processes could not be stopped ({kill_error})"
    if why is not None:
        recorder.event("note", message=f"not re-scored: {why}; the final score is RE-Bench's rule "
                       "(best intermediate score)")
        return None
    with store.session() as session:
        profile_name = session.get_one(Attempt, attempt_id).profile
    profile = env.profile(profile_name)
    anchors = None
    if uses_window_anchors(profile, rule_of(profile)):
        anchors = anchor_solutions(env, profile_name, assets_dir(env, profile_name, build=False))
        if anchors is None:
            recorder.event("note", message="no window anchors: the reference solution is made by its run.sh; "
                           "the final score is normalized with the anchors in force")
    progress(attempt_id, "re-scoring the best solutions")
    if score_snapshots is not None:
        taken = score_snapshots.taken
    else:
        taken = [await final_candidate(final_snapshot, last_valid_score(store, attempt_id))]
    return await rescore(
        sandbox, taken, candidates=profile.rescore.candidates, repeats=profile.rescore.repeats,
        direction=profile.direction, timeout_s=profile.score_timeout_s,
        record=lambda result, kind, extra: recorder.score(result, kind, extra),
        log=lambda message: progress(attempt_id, message), tokens=tokens, anchors=anchors)


def finalize_row(store: Store, env: Environment, rule_of: Callable[[Profile], FinalRule], attempt_id: int,
                 outcome: AttemptOutcome, clock: AttemptClock, snapshot: str | None, summary: RescoreSummary | None,
                 rescoring: bool) -> None:
    """Write the attempt's final row: RE-Bench's rule over its intermediate scores, or the re-scored median
    (`rule_of` gives the run's final rule for a profile), normalized with the anchors that apply, and the
    outcome's status and times; the outcome gets the same final numbers."""
    with store.session() as session:
        attempt = session.get_one(Attempt, attempt_id)
        profile = env.profile(attempt.profile)
        raws = [s.raw for s in session.query(ScoreEvent)
                .filter_by(attempt_id=attempt_id, kind=ScoreKind.INTERMEDIATE).order_by(ScoreEvent.id)]
        rule = rule_of(profile)
        rule_raw = final_raw_score(raws, rule=RULE_ONLY if rule == "rescore_best" else rule,
                                   direction=profile.direction)
        final_rule: FinalRule = RULE_ONLY if rule == "rescore_best" else rule
        final = rule_raw
        if rescoring and summary is not None:
            final, final_rule = summary.final_raw, "rescore_best"
        anchors = resolve_anchors(store, env, attempt.profile)
        # The final score's anchors: the re-scoring window's where it measured them (derived from
        # the score rows, as reports derive them); intermediate scores keep the anchors in force.
        window = session.scalars(select(ScoreEvent).where(
            ScoreEvent.attempt_id == attempt_id,
            ScoreEvent.kind.in_([ScoreKind.ANCHOR_START, ScoreKind.ANCHOR_REFERENCE]))).all()
        scale = final_anchors(final_rule, window, profile.direction, anchors)
        outcome.final_raw = final
        outcome.final_normalized = normalize(final, scale.start, scale.reference)
        outcome.working_s = clock.working_seconds()
        attempt.status = outcome.status
        attempt.error_source = outcome.error_source
        attempt.error_message = outcome.error_message
        attempt.limit_reason = outcome.limit_reason
        attempt.final_raw = final
        attempt.final_normalized = outcome.final_normalized
        attempt.final_rule = final_rule
        attempt.rule_raw = rule_raw
        attempt.rule_normalized = normalize(rule_raw, anchors.start, anchors.reference)
        attempt.anchors_kind = scale.kind
        attempt.wall_s = clock.wall_seconds()
        attempt.working_s = clock.working_seconds()
        attempt.model_wait_s = max(attempt.model_wait_s, clock.model_wait_s)
        attempt.ended_at = datetime.now(UTC)
        attempt.snapshot_path = snapshot
        attempt.submitted = outcome.submitted
