"""`rebench export inspect`: attempts as Inspect eval logs, one per (campaign, environment, agent).

Each attempt is one sample (epoch 1, id = the attempt's id): the task's instructions as its
input, its transcript as events and messages (rebench.export.inspect_events), the final score
under the final rule and under RE-Bench's rule (raw and normalized with the anchors in force,
as the report normalizes), working, wall and model-wait time, tokens, cost, status and error.
Imported METR rows have no transcript: their samples carry scores only. Logs are built and
written one at a time through Inspect's own types and writer, so memory stays at one log's.

The logs say `trust_content = False`: everything in them was written or chosen by the agent
under test, so Inspect's viewer shows it as plain text (no markdown, links or media).
"""

from __future__ import annotations

import hashlib
import os
import statistics
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from sqlalchemy import select

from rebench.errors import RebenchError
from rebench.export import Anchors, aware, make_out_folder, require_inspect
from rebench.provenance import rebench_version
from rebench.report.data import Normalizer, agent_label
from rebench.report.known_environments import EnvironmentInfo, default_info
from rebench.report.log_names import log_name
from rebench.store import Attempt, Campaign, Event, Pause, ScoreEvent, Store

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from rebench.export.inspect_events import Transcript

SCORERS = ("final", "rebench_rule")


class ExportedLog(BaseModel):
    """One written log and what went into it, for the command's output and for checks."""

    path: str
    campaign: int | None
    environment: str
    agent: str
    attempts: list[int]
    events: dict[int, int]
    """Per attempt: Inspect events written."""
    rows: dict[int, dict[str, int]]
    """Per attempt: rebench rows read, by event kind (plus `score_row` and `pause`)."""


class ExportSummary(BaseModel):
    out: str
    logs: list[ExportedLog]


GroupKey = tuple[int | None, str, str]


def select_attempts(store: Store, campaigns: Sequence[int] = (),
                    attempts: Sequence[int] = ()) -> dict[GroupKey, list[int]]:
    """Attempt ids by (campaign, environment, agent label); an unknown id is a one-line error."""
    with store.session() as session:
        if campaigns:
            known = set(session.scalars(select(Campaign.id).where(Campaign.id.in_(list(campaigns)))))
            missing = sorted(set(campaigns) - known)
            if missing:
                raise RebenchError(f"no campaign with id {missing[0]} (see `rebench campaigns list`)")
        if attempts:
            known = set(session.scalars(select(Attempt.id).where(Attempt.id.in_(list(attempts)))))
            missing = sorted(set(attempts) - known)
            if missing:
                raise RebenchError(f"no attempt with id {missing[0]} (see `rebench attempts list`)")
        query = select(Attempt).order_by(Attempt.id)
        if campaigns or attempts:
            query = query.where(Attempt.campaign_id.in_(list(campaigns)) | Attempt.id.in_(list(attempts)))
        groups: dict[GroupKey, list[int]] = {}
        for attempt in session.scalars(query):
            groups.setdefault((attempt.campaign_id, attempt.environment, agent_label(attempt)), []).append(attempt.id)
    return groups


def export_inspect(store: Store, out: Path, *, campaigns: Sequence[int] = (), attempts: Sequence[int] = (),
                   info: EnvironmentInfo | None = None) -> ExportSummary:
    """Write the logs; nothing is written when an id is unknown or the folder cannot be made."""
    require_inspect("rebench export inspect")
    groups = select_attempts(store, campaigns, attempts)
    make_out_folder(out)
    normalizer = Normalizer(store, info or default_info())
    logs = [write_log(store, out, key, ids, normalizer) for key, ids in groups.items()]
    return ExportSummary(out=str(out), logs=logs)


def _anchors(normalizer: Normalizer, attempt: Attempt) -> Anchors | None:
    spec = normalizer.spec(attempt.environment, attempt.profile) if attempt.source == "own" else None
    return None if spec is None else Anchors(spec[1].start, spec[1].reference)


def attempt_rows(session: Session, attempt_id: int) -> tuple[bool, list[ScoreEvent], list[Pause]]:
    """What an export reads of an attempt beside its events: whether its agent's own tools ran through
    the harness (a `tool_result` event), its score rows and its pauses, in order."""
    agent_tools = session.scalar(select(Event.id).where(Event.attempt_id == attempt_id,
                                                        Event.kind == "tool_result").limit(1)) is not None
    scores = list(session.scalars(select(ScoreEvent).where(ScoreEvent.attempt_id == attempt_id)
                                  .order_by(ScoreEvent.id)))
    pauses = list(session.scalars(select(Pause).where(Pause.attempt_id == attempt_id).order_by(Pause.id)))
    return agent_tools, scores, pauses


def _transcript(store: Store, attempt: Attempt, anchors: Anchors | None) -> Transcript:
    from rebench.export.gateway_calls import BodyFiles
    from rebench.export.inspect_events import TranscriptBuilder

    body_files = BodyFiles(store.snapshots_dir, attempt.id, attempt.snapshot_path)
    with store.session() as session:
        agent_tools, scores, pauses = attempt_rows(session, attempt.id)
        rows = session.scalars(select(Event).where(Event.attempt_id == attempt.id).order_by(Event.seq)
                               .execution_options(yield_per=500))
        return TranscriptBuilder(attempt, anchors, agent_tools=agent_tools,
                                 body_files=body_files).build(rows, scores, pauses)


def _scores(store: Store, normalizer: Normalizer, attempt: Attempt) -> dict[str, Any]:
    """Normalized as the report does: with the re-scoring window's anchors where the attempt measured them."""
    from inspect_ai.scorer import Score

    with store.session() as session:
        events = list(session.scalars(select(ScoreEvent).where(ScoreEvent.attempt_id == attempt.id)
                                      .order_by(ScoreEvent.id)))
    final, anchors_kind = normalizer.final(attempt, events)
    final_raw = attempt.final_raw
    rescored = attempt.final_rule == "rescore_best"
    rule = normalizer.rule(attempt) if rescored else final
    rule_raw = attempt.rule_raw if rescored else final_raw
    rule_name = "best" if rescored else (attempt.final_rule or "best")
    return {
        "final": Score(value={"normalized": final, "raw": final_raw},
                       metadata={"rule": attempt.final_rule, "anchors": anchors_kind}),
        "rebench_rule": Score(value={"normalized": rule, "raw": rule_raw},
                              metadata={"rule": rule_name, "anchors": anchors_kind}),
    }


def _sample(store: Store, attempt: Attempt, normalizer: Normalizer) -> tuple[Any, Transcript]:
    from inspect_ai.log import EvalError as InspectError
    from inspect_ai.log import EvalSample, EvalSampleLimit
    from inspect_ai.model import ModelUsage

    transcript = _transcript(store, attempt, _anchors(normalizer, attempt))
    imported = attempt.source != "own"
    instructions = transcript.instructions or (
        f"(METR's run {attempt.external_id} of {attempt.environment}: imported scores, no transcript)" if imported
        else f"({attempt.environment}: no start event recorded)")
    usage = {}
    if attempt.model:
        usage[attempt.model] = ModelUsage(
            input_tokens=attempt.input_tokens, output_tokens=attempt.output_tokens,
            total_tokens=attempt.input_tokens + attempt.output_tokens,
            input_tokens_cache_read=attempt.cached_tokens or None, total_cost=attempt.cost_usd)
    limit = None
    if attempt.limit_reason is not None:
        type_, value = {"time": ("working", attempt.budget_s), "tokens": ("token", 0.0), "cost": ("cost", 0.0)}.get(
            str(attempt.limit_reason), ("custom", 0.0))
        limit = EvalSampleLimit(type=type_, limit=value, reason=str(attempt.limit_reason))
    error = None
    if attempt.status == "error":
        error = InspectError(message=f"{attempt.error_source}: {attempt.error_message}", traceback="",
                             traceback_ansi="")
    recordings = {r["session"]: r for r in transcript.recordings}
    metadata = {
        "attempt": attempt.id, "campaign": attempt.campaign_id, "source": attempt.source,
        "environment": attempt.environment, "env_version": attempt.env_version, "profile": attempt.profile,
        "agent": attempt.agent, "model": attempt.model, "budget_s": attempt.budget_s, "seed": attempt.seed,
        "backend": attempt.backend, "status": str(attempt.status), "submitted": attempt.submitted,
        "error_source": attempt.error_source and str(attempt.error_source), "error_message": attempt.error_message,
        "limit_reason": attempt.limit_reason and str(attempt.limit_reason), "counted": attempt.counted,
        "working_s": attempt.working_s, "wall_s": attempt.wall_s, "model_wait_s": attempt.model_wait_s,
        "input_tokens": attempt.input_tokens, "output_tokens": attempt.output_tokens,
        "cached_tokens": attempt.cached_tokens, "cost_usd": attempt.cost_usd,
        "final_rule": attempt.final_rule, "external_id": attempt.external_id,
        "rebench_version": attempt.rebench_version, "env_hash": attempt.env_hash,
        "recordings": list(recordings.values()),
    }
    sample = EvalSample(
        id=attempt.id, epoch=1, input=instructions, target="", messages=transcript.messages,
        output=transcript.output, scores=_scores(store, normalizer, attempt), metadata=metadata,
        events=transcript.events,
        model_usage=usage, total_time=attempt.wall_s, working_time=attempt.working_s,
        started_at=aware(attempt.started_at).isoformat() if attempt.started_at else None,
        completed_at=aware(attempt.ended_at).isoformat() if attempt.ended_at else None,
        error=error, limit=limit, uuid=f"rebench-attempt-{attempt.id}",
    )
    return sample, transcript


def _mean(values: Iterable[Any]) -> float:
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return statistics.fmean(numbers) if numbers else 0.0


def write_log(store: Store, out: Path, key: GroupKey, ids: list[int], normalizer: Normalizer) -> ExportedLog:
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalResults,
        EvalScore,
        EvalSpec,
        EvalStats,
        write_eval_log,
    )
    from inspect_ai.model import ModelUsage
    from inspect_ai.viewer import ViewerConfig

    campaign, environment, agent = key
    samples, counts, rows = [], {}, {}
    with store.session() as session:
        attempts = list(session.scalars(select(Attempt).where(Attempt.id.in_(ids)).order_by(Attempt.id)))
        created = session.get(Campaign, campaign).created_at if campaign is not None else None  # type: ignore[union-attr]
        session.expunge_all()
    for attempt in attempts:
        sample, transcript = _sample(store, attempt, normalizer)
        samples.append(sample)
        counts[attempt.id], rows[attempt.id] = len(sample.events), transcript.counts
    first = attempts[0]
    created = created or min(a.created_at for a in attempts)
    eval_id = hashlib.sha256(f"{store.path}|{campaign}|{environment}|{agent}".encode()).hexdigest()[:22]
    model_usage: dict[str, ModelUsage] = {}
    for sample in samples:
        for model, use in sample.model_usage.items():
            model_usage[model] = model_usage[model] + use if model in model_usage else use
    results = EvalResults(total_samples=len(samples), completed_samples=sum(
        1 for a in attempts if a.status in ("done", "limit", "error")), scores=[
        EvalScore(name=name, scorer=name, scored_samples=len(samples), metrics={
            "mean": EvalMetric(name="mean", value=_mean(s.scores[name].value["normalized"] for s in samples))})
        for name in SCORERS])
    running = any(a.status in ("queued", "running") for a in attempts)
    interrupted = any(a.status == "interrupted" for a in attempts)
    started = [aware(a.started_at) for a in attempts if a.started_at]
    ended = [aware(a.ended_at) for a in attempts if a.ended_at]
    log = EvalLog(
        version=2, status="started" if running else ("cancelled" if interrupted else "success"),
        eval=EvalSpec(
            eval_id=eval_id, run_id=f"rebench-campaign-{campaign}" if campaign is not None else "rebench-imported",
            created=aware(created).isoformat(), task=environment, task_id=eval_id, task_version=first.env_version or 0,
            task_args={"profile": first.profile, "budget_s": first.budget_s}, solver=agent,
            dataset=EvalDataset(name=environment, samples=len(samples), sample_ids=[a.id for a in attempts]),
            model=first.model or "none/none", config=EvalConfig(),
            metadata={"rebench": {"campaign": campaign, "agent": agent, "source": first.source,
                                  "database": str(store.path), "exported_by": rebench_version(),
                                  "ran_on": sorted({a.rebench_version for a in attempts if a.rebench_version}),
                                  "env_hashes": sorted({a.env_hash for a in attempts if a.env_hash})}},
            packages={"rebench": rebench_version()},
            viewer=ViewerConfig(trust_content=False),
        ),
        results=results,
        stats=EvalStats(started_at=min(started).isoformat() if started else "",
                        completed_at=max(ended).isoformat() if ended and not running else "",
                        model_usage=model_usage),
        samples=samples,
    )
    path = out / log_name(campaign, environment, agent, created)
    with tempfile.TemporaryDirectory(dir=out, prefix=".rebench-export-") as scratch:
        partial = Path(scratch) / path.name
        write_eval_log(log, str(partial), format="eval")
        os.replace(partial, path)
    return ExportedLog(path=str(path), campaign=campaign, environment=environment, agent=agent,
                       attempts=[a.id for a in attempts], events=counts, rows=rows)
