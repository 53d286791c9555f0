"""`rebench export atif`: each attempt as an ATIF trajectory (Harbor's Agent Trajectory Interchange
Format, RFC 0001, v1.7), one `trajectory.json` in a folder per attempt.

The steps come from rebench.export.atif_steps; the root holds the agent (name, version, model, the
tools it was offered), the final metrics (the attempt's metered tokens and cost) and, under
`extra.rebench`, what ATIF has no field for: environment, profile, budget, clock, pauses, every score
row, the final score under the final rule and RE-Bench's rule, the held-out final, and the versions.

A file is written as it is read: the steps stream into a temporary file beside it (the root's
summary fields follow the steps), which replaces `trajectory.json` only when complete. JSON is
written ASCII-only: every character outside printable ASCII, control characters included, is an
escape, and the agent's text reads back byte for byte. No provider key, gateway token, body-file
path, snapshot folder or held-out scorer message is among the fields written.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel
from sqlalchemy import select

from rebench.errors import RebenchError
from rebench.export import Anchors, aware, make_out_folder
from rebench.export.atif_gateway import GatewayTurns
from rebench.export.atif_steps import AtifSteps, Step, StepQueue
from rebench.export.body_files import BodyFiles
from rebench.export.inspect_log import attempt_rows, select_attempts
from rebench.provenance import rebench_version
from rebench.report.data import Normalizer, agent_label
from rebench.report.known_environments import EnvironmentInfo, default_info
from rebench.store import Attempt, Event, Pause, ScoreEvent, Store

SCHEMA_VERSION = "ATIF-v1.7"
FILE_NAME = "trajectory.json"


class ExportedTrajectory(BaseModel):
    attempt: int
    path: str
    steps: int
    rows: dict[str, int]
    """rebench rows read, by event kind (plus `score_row`), for checks against the store."""


class AtifSummary(BaseModel):
    out: str
    trajectories: list[ExportedTrajectory]


def select_ids(store: Store, campaigns: Sequence[int], attempts: Sequence[int]) -> list[int]:
    """As the Inspect export selects (an unknown id is a one-line error), one trajectory per attempt."""
    return sorted(i for ids in select_attempts(store, campaigns, attempts).values() for i in ids)


def export_atif(store: Store, out: Path, *, campaigns: Sequence[int] = (), attempts: Sequence[int] = (),
                info: EnvironmentInfo | None = None) -> AtifSummary:
    """Write the trajectories; nothing is written when an id is unknown or the folder cannot be made."""
    ids = select_ids(store, campaigns, attempts)
    make_out_folder(out)
    normalizer = Normalizer(store, info or default_info())
    return AtifSummary(out=str(out), trajectories=[write_trajectory(store, out, i, normalizer) for i in ids])


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-.") or "x"


def folder_name(attempt: Attempt) -> str:
    """A folder a person finds the attempt by: its id, environment and agent (with model)."""
    return f"attempt-{attempt.id}_{_slug(attempt.environment)}_{_slug(agent_label(attempt))}"


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, allow_nan=False, default=str)


def _anchors(normalizer: Normalizer, attempt: Attempt) -> tuple[Anchors | None, Anchors | None]:
    spec = normalizer.spec(attempt.environment, attempt.profile) if attempt.source == "own" else None
    if spec is None:
        return None, None
    held = spec[1].heldout
    return Anchors(spec[1].start, spec[1].reference), (None if held is None else Anchors(held.start, held.reference))


def _agent(attempt: Attempt, tools: dict[str, dict[str, Any]]) -> dict[str, Any]:
    extra: dict[str, Any] = {"label": agent_label(attempt), "ran_on_rebench": attempt.rebench_version}
    try:
        from rebench.agents.declared import declared_agents, load_declaration

        declared = declared_agents().get(attempt.agent)
        if declared is not None:
            extra["installed_packages_declared_now"] = load_declaration(declared).install.model_dump(mode="json")
    except RebenchError:
        pass
    agent: dict[str, Any] = {"name": attempt.agent, "version": attempt.rebench_version or rebench_version()}
    if attempt.model:
        agent["model_name"] = attempt.model
    if tools:
        agent["tool_definitions"] = list(tools.values())
    agent["extra"] = extra
    return agent


def _facts(store: Store, normalizer: Normalizer, attempt: Attempt, steps: AtifSteps,
           pauses: list[Pause], score_rows: list[ScoreEvent]) -> dict[str, Any]:
    """rebench's own facts about the attempt (root `extra.rebench`)."""
    final, anchors_kind = normalizer.final(attempt, score_rows)
    rescored = attempt.final_rule == "rescore_best"
    heldout = [s for s in steps.scores if s["kind"] == "heldout"]
    return {
        "attempt": attempt.id, "campaign": attempt.campaign_id, "source": attempt.source,
        "environment": attempt.environment, "env_version": attempt.env_version, "env_hash": attempt.env_hash,
        "profile": attempt.profile, "budget_s": attempt.budget_s, "seed": attempt.seed, "backend": attempt.backend,
        "network": str(attempt.network), "status": str(attempt.status), "submitted": attempt.submitted,
        "error_source": attempt.error_source and str(attempt.error_source), "error_message": attempt.error_message,
        "limit_reason": attempt.limit_reason and str(attempt.limit_reason), "counted": attempt.counted,
        "started_at": attempt.started_at and aware(attempt.started_at).isoformat(),
        "ended_at": attempt.ended_at and aware(attempt.ended_at).isoformat(),
        "working_s": attempt.working_s, "wall_s": attempt.wall_s, "model_wait_s": attempt.model_wait_s,
        "final": {"raw": attempt.final_raw, "normalized": final, "rule": attempt.final_rule, "anchors": anchors_kind},
        "rebench_rule": {"raw": attempt.rule_raw if rescored else attempt.final_raw,
                         "normalized": normalizer.rule(attempt) if rescored else final,
                         "rule": "best" if rescored else (attempt.final_rule or "best")},
        "heldout": heldout[-1] if heldout else None,
        "scores": steps.scores,
        "pauses": [{"reason": p.reason, "start_s": p.start_s, "end_s": p.end_s} for p in pauses],
        "aide_tree": steps.aide_tree or None,
        "recordings": list(steps.recordings.values()) or None,
        "external_id": attempt.external_id,
        "ran_on_rebench": attempt.rebench_version, "exported_by": rebench_version(),
    }


class _Writer:
    """Steps into the open file, comma-separated, one a line."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.first = True

    def __call__(self, step: Step) -> None:
        self.stream.write(("\n" if self.first else ",\n") + _dump(step))
        self.first = False


def _stream(store: Store, attempt: Attempt, normalizer: Normalizer, stream: IO[str]) -> tuple[int, dict[str, int]]:
    anchors, heldout = _anchors(normalizer, attempt)
    session_id = f"rebench-attempt-{attempt.id}"
    stream.write("{" + ", ".join(f"{_dump(k)}: {_dump(v)}" for k, v in (
        ("schema_version", SCHEMA_VERSION), ("session_id", session_id), ("trajectory_id", session_id))))
    stream.write(', "steps": [')
    queue = StepQueue(_Writer(stream))
    gateway = GatewayTurns(BodyFiles(store.snapshots_dir, attempt.id, attempt.snapshot_path))
    with store.session() as session:
        agent_tools, score_rows, pauses = attempt_rows(session, attempt.id)
        steps = AtifSteps(attempt, anchors, heldout, queue, agent_tools=agent_tools, gateway=gateway)
        if attempt.source != "own":
            queue.add({"timestamp": aware(attempt.created_at).isoformat(), "source": "system",
                       "message": f"METR's run {attempt.external_id} of {attempt.environment}: imported scores, "
                                  "no transcript", "extra": {}})
        rows = session.scalars(select(Event).where(Event.attempt_id == attempt.id).order_by(Event.seq)
                               .execution_options(yield_per=500))
        steps.build(rows, score_rows)
        if queue.written == 0:  # ATIF asks for one step at least
            queue.add({"timestamp": aware(attempt.created_at).isoformat(), "source": "system",
                       "message": f"attempt {attempt.id} ({attempt.status}): no events recorded", "extra": {}})
            queue.close()
        facts = _facts(store, normalizer, attempt, steps, pauses, score_rows)
    stream.write("\n]")
    tail = {
        "agent": _agent(attempt, steps.tools),
        "final_metrics": {"total_prompt_tokens": attempt.input_tokens,
                          "total_completion_tokens": attempt.output_tokens,
                          "total_cached_tokens": attempt.cached_tokens, "total_cost_usd": attempt.cost_usd,
                          "total_steps": queue.written, "extra": {"model_wait_s": attempt.model_wait_s}},
        "extra": {"rebench": facts},
    }
    stream.write("".join(f", {_dump(k)}: {_dump(v)}" for k, v in tail.items()) + "}\n")
    return queue.written, dict(steps.counts)


def write_trajectory(store: Store, out: Path, attempt_id: int, normalizer: Normalizer) -> ExportedTrajectory:
    with store.session() as session:
        attempt = session.get_one(Attempt, attempt_id)
        session.expunge(attempt)
    folder = out / folder_name(attempt)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise RebenchError(f"{str(folder)!r} is a link or a file, not a folder: remove it or give another --out")
    folder.mkdir(exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=folder, prefix=".trajectory-", suffix=".partial")
    try:
        with os.fdopen(handle, "w", encoding="ascii") as stream:
            count, rows = _stream(store, attempt, normalizer, stream)
        os.replace(partial, folder / FILE_NAME)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return ExportedTrajectory(attempt=attempt_id, path=str(folder / FILE_NAME), steps=count, rows=rows)
