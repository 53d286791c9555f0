"""What `rebench rescore` re-scores for each selected attempt, or why it skips it.

An attempt keeps two kinds of snapshots (rebench.sandbox.snapshot, rebench.scoring.rescore): the
solution it ended with, and under `final_score = "rescore_best"`, or `best` on a profile with a held-out
split (rebench.scoring.heldout.snapshots_at_calls), one at each score call. Its final rule decides which
are re-scored, so that the re-score is the number the rule would give now:

- `rescore_best`: the snapshots its re-scoring used (the `rescore` score rows name them), or, where it
  was never re-scored (interrupted), the ones that rule picks from its score calls now;
- `best` with snapshots at score calls: each valid call's snapshot, distinct by content, scored once;
  the run counts the best of them, as the rule counted the calls (a fixed scorer, or another machine
  for timings, may change which call is best, so the best call's alone would not do). Where no valid
  call has a whole snapshot, the solution it ended with, and a line in the plan says why;
- otherwise (`last`, or `best` without snapshots at score calls): the solution it ended with; under
  `best` a line in the plan says that this is not the best call's solution.

Which rule it ran under is its row's `final_rule` where that says `rescore_best`, else its campaign's
`--final-rule`, else its profile's (a `rescore_best` attempt that was never re-scored says `best` on its
row). The held-out final is scored again on the solution the attempt's own held-out final scored (its
best call's snapshot, under `best`), else on the final solution.

A snapshot cut by the snapshot budget is not the solution that was scored, so it is never re-scored
(the plan lists it); a candidate snapshot whose content no longer matches its recorded digest is
refused, with its attempt; so is a folder holding what a snapshot copy never makes (a link or hard link
out of it, a FIFO, a device, more than the profile's snapshot cap: rebench.sandbox.snapshot_check), which
is checked before its digest is taken. Everything is read from the database and the snapshot folders:
nothing here writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from rebench.environments.metadata import SnapshotCap
from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.sandbox.snapshot_check import check_folder
from rebench.scoring.normalize import is_valid
from rebench.scoring.rescore import ScoreSnapshot, choose_candidates, folder_digest
from rebench.store.db import Store
from rebench.store.models import Attempt, Campaign, Event, EventKind, ScoreEvent, ScoreKind

FINISHED = ("done", "limit", "error")
RULE_RESCORE = "rescore_best"
RULE_BEST = "best"
RULE_FINAL = "final"
FINAL_SNAPSHOT_ID = 0
"""The `score_id` standing for the solution an attempt ended with (it was not scored by a call)."""


class Selection(BaseModel):
    """What the user asked for: exactly one of the three."""

    attempts: list[int] = Field(default_factory=list)
    campaign: int | None = None
    environments: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        if self.attempts:
            return "attempt(s) " + ", ".join(map(str, sorted(set(self.attempts))))
        if self.campaign is not None:
            return f"campaign {self.campaign}"
        return "environment(s) " + ", ".join(sorted(set(self.environments)))

    def key(self) -> dict[str, object]:
        if self.attempts:
            return {"attempts": sorted(set(self.attempts))}
        if self.campaign is not None:
            return {"campaign": self.campaign}
        return {"environments": sorted(set(self.environments))}


class AttemptPlan(BaseModel):
    """One attempt to re-score: where, by which rule, and which snapshots."""

    attempt_id: int
    environment: str
    profile: str
    rule: str
    candidates: list[ScoreSnapshot]
    skipped_snapshots: list[str] = Field(default_factory=list)
    final_snapshot: str | None = None
    """The solution it ended with, kept whole."""
    heldout_snapshot: str | None = None
    """What a held-out re-score takes: the snapshot the attempt's held-out final scored (its best score
    call's, under `best`), else `final_snapshot`."""

    def describe(self) -> str:
        """What is re-scored, in words (the run's line for the attempt)."""
        if self.rule == RULE_BEST:
            return (f"each valid score call's snapshot ({len(self.candidates)} distinct), once; the best counts "
                    "(best rule)")
        if self.rule == RULE_RESCORE:
            return f"the snapshots rescore_best re-scores ({len(self.candidates)}); the best median counts"
        return "the solution it ended with"


class Plan(BaseModel):
    todo: list[AttemptPlan] = Field(default_factory=list)
    skipped: dict[int, str] = Field(default_factory=dict)
    """Attempt id -> why it is not re-scored."""


def check_selection(selection: Selection) -> None:
    given = sum((bool(selection.attempts), selection.campaign is not None, bool(selection.environments)))
    if given != 1:
        raise RebenchError("give exactly one of --attempt ID (repeatable), --campaign ID or --env E")


def selected_ids(session: Session, selection: Selection, registry: EnvironmentRegistry) -> list[int]:
    """The attempt ids the selection names; an unknown id, campaign or environment is an error."""
    check_selection(selection)
    if selection.attempts:
        ids = sorted(set(selection.attempts))
        found = set(session.scalars(select(Attempt.id).where(Attempt.id.in_(ids))))
        missing = [i for i in ids if i not in found]
        if missing:
            raise RebenchError(f"no attempt with id {missing[0]} in this database")
        return ids
    if selection.campaign is not None:
        if session.get(Campaign, selection.campaign) is None:
            existing = ", ".join(map(str, session.scalars(select(Campaign.id).order_by(Campaign.id)))) or "none"
            raise RebenchError(f"no campaign {selection.campaign} in this database; campaigns there: {existing}")
        return list(session.scalars(select(Attempt.id).where(Attempt.campaign_id == selection.campaign)
                                    .order_by(Attempt.id)))
    known = set(registry.names()) | set(session.scalars(select(Attempt.environment).distinct()))
    for name in selection.environments:
        if name not in known:
            raise RebenchError(f"unknown environment {name!r}; allowed: {', '.join(sorted(known)) or 'none'}")
    return list(session.scalars(select(Attempt.id).where(Attempt.environment.in_(selection.environments))
                                .order_by(Attempt.id)))


def plan_attempts(store: Store, ids: Sequence[int], registry: EnvironmentRegistry) -> Plan:
    plan = Plan()
    envs: dict[str, Environment | None] = {}
    with store.session() as session:
        for attempt_id in ids:
            attempt = session.get_one(Attempt, attempt_id)
            if attempt.environment not in envs:
                try:
                    envs[attempt.environment] = registry.get(attempt.environment)
                except RebenchError:
                    envs[attempt.environment] = None
            result = _plan_one(session, attempt, envs[attempt.environment])
            if isinstance(result, str):
                plan.skipped[attempt_id] = result
            else:
                plan.todo.append(result)
    return plan


def _plan_one(session: Session, attempt: Attempt, env: Environment | None) -> AttemptPlan | str:
    if attempt.source != "own":
        return "imported attempt: no snapshot of its solution was kept"
    if attempt.status not in FINISHED:
        return f"not finished (status {attempt.status})"
    if env is None:
        return (f"environment {attempt.environment!r} (version {attempt.env_version}) is not in this "
                "checkout, so it cannot be rebuilt")
    if attempt.profile not in env.metadata.profiles:
        return (f"environment {attempt.environment!r} version {env.version} has no profile {attempt.profile!r} "
                "any more, so the attempt's setup cannot be rebuilt")
    profile = env.profile(attempt.profile)
    if profile.gateway is not None:
        return "its scorer calls a model through the gateway, which re-scoring does not provide yet"
    if profile.resources.gpus:
        return f"its profile needs {profile.resources.gpus} GPU(s), which re-scoring does not lease yet"
    snapshots = [e.data for e in session.scalars(select(Event).where(
        Event.attempt_id == attempt.id, Event.kind == EventKind.SNAPSHOT).order_by(Event.seq))]
    at_calls = [d for d in snapshots if d.get("score_id") is not None and d.get("path")]
    rescored = session.scalars(select(ScoreEvent.id).where(ScoreEvent.attempt_id == attempt.id,
                                                           ScoreEvent.kind == ScoreKind.RESCORE)).first()
    finals = [d for d in snapshots if d.get("score_id") is None]
    rule = _rule_it_ran_under(session, attempt, profile.final_score)
    plan: AttemptPlan | str
    cap = profile.snapshot
    if rescored is not None or (at_calls and rule == RULE_RESCORE):
        plan = _candidates(session, attempt, at_calls, profile.rescore.candidates, profile.direction, cap)
    elif rule == RULE_BEST:
        plan = _best_calls(session, attempt, at_calls, finals, profile.direction, cap)
    else:
        plan = _final(attempt, finals, cap)
    if isinstance(plan, AttemptPlan) and plan.rule != RULE_FINAL and isinstance(_final(attempt, finals, cap),
                                                                                AttemptPlan):
        plan.final_snapshot = attempt.snapshot_path
    if isinstance(plan, AttemptPlan):
        plan.heldout_snapshot = _heldout_snapshot(session, attempt, at_calls, plan, cap) or plan.final_snapshot
    return plan


def _rule_it_ran_under(session: Session, attempt: Attempt, profile_rule: str) -> str:
    """The final rule the attempt ran under (module docstring)."""
    if attempt.final_rule == RULE_RESCORE:
        return RULE_RESCORE
    campaign = session.get(Campaign, attempt.campaign_id) if attempt.campaign_id is not None else None
    override = (campaign.spec or {}).get("final_rule") if campaign is not None else None
    return str(override or profile_rule)


def _heldout_snapshot(session: Session, attempt: Attempt, at_calls: list[dict[str, object]],
                      plan: AttemptPlan, cap: SnapshotCap) -> str | None:
    """The best call's snapshot the attempt's held-out final scored, when it is still whole (None:
    it scored the final solution; where that snapshot is gone or changed, a line in the plan says so)."""
    row = session.scalars(select(ScoreEvent).where(ScoreEvent.attempt_id == attempt.id,
                                                   ScoreEvent.kind == ScoreKind.HELDOUT)
                          .order_by(ScoreEvent.id.desc())).first()
    details = row.details if row is not None and row.details else {}
    if details.get("solution") != "best_call" or not details.get("snapshot"):
        return None
    folder = Path(str(details["snapshot"]))
    digest = next((d.get("sha256") for d in at_calls if d.get("score_id") == details.get("score_id")), None)
    if digest is not None and _unrestorable(folder, cap) is None and folder_digest(folder) == digest:
        return str(folder)
    plan.skipped_snapshots.append(f"held-out: the best call's snapshot {folder} is gone or changed since it was "
                                  "taken, so the held-out final is scored again on the final solution")
    return None


def _unrestorable(folder: Path, cap: SnapshotCap) -> str | None:
    """Why a snapshot folder may not be laid into a sandbox (rebench.sandbox.snapshot_check), or None."""
    if not folder.is_dir() and not folder.is_symlink():
        return f"its snapshot folder {folder} is gone"
    why = check_folder(folder, int(cap.max_bytes), cap.max_files)
    return None if why is None else f"snapshot {folder} cannot be restored: {why}"


def _final(attempt: Attempt, finals: list[dict[str, object]], cap: SnapshotCap) -> AttemptPlan | str:
    """The solution the attempt ended with, when it was kept whole."""
    if attempt.snapshot_path is None or not finals:
        return "no snapshot of its final solution was kept"
    last = finals[-1]
    if last.get("capped") or int(str(last.get("left_out_count") or 0)):
        return f"its final snapshot was cut by the snapshot budget ({last.get('note')})"
    path = Path(attempt.snapshot_path)
    why = _unrestorable(path, cap)
    if why is not None:
        return why
    snapshot = ScoreSnapshot(path=str(path), sha256=folder_digest(path), score_id=FINAL_SNAPSHOT_ID,
                             raw=attempt.final_raw if attempt.final_raw is not None else 0.0)
    return AttemptPlan(attempt_id=attempt.id, environment=attempt.environment, profile=attempt.profile,
                       rule=RULE_FINAL, candidates=[snapshot], final_snapshot=str(path))


def _candidates(session: Session, attempt: Attempt, at_calls: list[dict[str, object]], count: int,
                direction: str, cap: SnapshotCap) -> AttemptPlan | str:
    """The snapshots its re-scoring used (named by its `rescore` rows, in their order); where it was
    never re-scored, the best `count` of its score calls' snapshots, picked as that rule picks."""
    raws = {e.id: e.raw for e in session.scalars(select(ScoreEvent).where(
        ScoreEvent.attempt_id == attempt.id, ScoreEvent.kind == ScoreKind.INTERMEDIATE))}
    chosen: list[ScoreSnapshot] = []
    for event in session.scalars(select(ScoreEvent).where(ScoreEvent.attempt_id == attempt.id,
                                                          ScoreEvent.kind == ScoreKind.RESCORE)
                                 .order_by(ScoreEvent.id)):
        of, path, digest = (event.details.get(key) for key in ("rescore_of", "snapshot", "sha256"))
        if isinstance(of, int) and path and of not in {c.score_id for c in chosen}:
            chosen.append(ScoreSnapshot(path=str(path), sha256=digest, score_id=of, raw=raws.get(of)))
    skipped: list[str] = []
    if not chosen:
        taken = [ScoreSnapshot(path=str(d["path"]), sha256=d.get("sha256"),
                               score_id=int(str(d["score_id"])), raw=raws.get(int(str(d["score_id"]))))
                 for d in at_calls]
        chosen, skipped = choose_candidates(taken, count, "lower" if direction == "lower" else "higher")
    if not chosen:
        why = "; ".join(skipped) if skipped else "no valid score call had a kept snapshot"
        return f"nothing of it can be re-scored: {why}"
    return _whole(chosen, cap) or AttemptPlan(attempt_id=attempt.id, environment=attempt.environment,
                                              profile=attempt.profile, rule=RULE_RESCORE, candidates=chosen,
                                         skipped_snapshots=skipped)


def _best_calls(session: Session, attempt: Attempt, at_calls: list[dict[str, object]],
                finals: list[dict[str, object]], direction: str, cap: SnapshotCap) -> AttemptPlan | str:
    """Under `best`: the snapshot of each valid score call, distinct by content (module docstring); where
    none is whole, the solution it ended with, with a line saying why it is not the best call's."""
    calls = [(e.id, e.raw) for e in session.scalars(select(ScoreEvent).where(
        ScoreEvent.attempt_id == attempt.id, ScoreEvent.kind == ScoreKind.INTERMEDIATE).order_by(ScoreEvent.id))]
    valid = [(number, score_id, float(raw)) for number, (score_id, raw) in enumerate(calls, 1)
             if raw is not None and is_valid(raw)]
    kept = {int(str(d["score_id"])): d for d in at_calls}
    taken: list[ScoreSnapshot] = []
    skipped: list[str] = []
    for number, score_id, raw in valid if at_calls else []:
        data = kept.get(score_id)
        if data is None:
            skipped.append(f"score call {number} ({raw:g}): no snapshot was kept (taking it failed)")
        elif not data.get("sha256"):
            skipped.append(f"score call {number} ({raw:g}): its snapshot {data['path']} was cut by the snapshot "
                           "budget, so it is not the solution that was scored")
        else:
            taken.append(ScoreSnapshot(path=str(data["path"]), sha256=str(data["sha256"]), score_id=score_id, raw=raw))
    chosen, _ = choose_candidates(taken, len(taken), "lower" if direction == "lower" else "higher")
    if chosen:
        return _whole(chosen, cap) or AttemptPlan(attempt_id=attempt.id, environment=attempt.environment,
                                             profile=attempt.profile, rule=RULE_BEST, candidates=chosen,
                                             skipped_snapshots=skipped)
    why = ("no score call was valid, so the rule picked none" if not valid
           else "no snapshots at score calls were kept (under best, only a profile with a held-out split keeps "
                "them, unless it turns them off)"
           if not at_calls else "no valid score call has a whole snapshot: " + "; ".join(skipped))
    plan = _final(attempt, finals, cap)
    if isinstance(plan, str):
        return f"{plan} (and under the best rule: {why})"
    plan.skipped_snapshots.append(f"best rule: {why}; so the solution it ended with is re-scored, not the best "
                                  "call's")
    return plan


def _whole(chosen: list[ScoreSnapshot], cap: SnapshotCap) -> str | None:
    """Why the chosen snapshots cannot be re-scored (one cut, gone, not restorable or changed since it was
    taken), or None."""
    for snapshot in chosen:
        folder = Path(snapshot.path)
        if snapshot.sha256 is None:
            return f"snapshot {folder} was cut by the snapshot budget"
        why = _unrestorable(folder, cap)
        if why is not None:
            return why
        if folder_digest(folder) != snapshot.sha256:
            return f"snapshot {folder} changed since it was taken (its content digest differs)"
    return None
