"""AttemptRunner: one attempt from sandbox start to a final attempt row.

    start sandbox -> install environment -> clock starts -> baseline score (paused)
    -> agent runs under the hard timer -> snapshot -> [re-score the best snapshots] -> final score
    -> stop sandbox

The attempt row is updated at each step, so whatever stops the harness leaves a
row that says how far it got; score events are committed as they happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from rebench.agents.base import Agent, AgentConfig, EnvironmentInfo
from rebench.agents.registry import load_agent
from rebench.attempt_outcome import AttemptOutcome, InfrastructureFailure
from rebench.clock import AttemptClock, PauseInterval
from rebench.context import AttemptContext, AttemptRecorder
from rebench.environments.build import assets_dir
from rebench.environments.install import install_environment
from rebench.environments.metadata import Profile, final_rule_sentence
from rebench.environments.registry import Environment
from rebench.errors import SandboxError
from rebench.final_score import finalize_row, heldout_solution_of, rescore_attempt
from rebench.gateway.attempt import AttemptGateway
from rebench.network import NetworkPolicy, effective_network, parse_network
from rebench.provenance import rebench_version
from rebench.sandbox.base import Sandbox, SandboxSpec
from rebench.sandbox.snapshot import SnapshotBudget
from rebench.sandboxes import create_sandbox
from rebench.scoring.heldout import heldout_skip, score_heldout, snapshots_at_calls
from rebench.scoring.rescore import FinalRule, RescoreSummary, ScoreSnapshots
from rebench.scoring.run import run_scoring
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus, ErrorSource, Event, EventKind, ScoreEvent, ScoreKind
from rebench.watchdog import watch_agent

Progress = Callable[[int, str], None]
SandboxFactory = Callable[[str, SandboxSpec, Environment], Sandbox]


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class RunHooks:
    """What a human attempt (rebench.human) changes in a run: its own agent object, a wall clock that
    survives the process, a keep-alive sandbox, and, for a resumed attempt, the sandbox it reattaches
    to instead of starting one (no install, no baseline: the attempt is already under way)."""

    agent: Agent | None = None
    clock: AttemptClock | None = None
    spec_update: dict[str, Any] = field(default_factory=dict)
    reattach: Callable[[SandboxSpec], Awaitable[Sandbox]] | None = None
    on_started: Callable[[Sandbox, AttemptClock], None] | None = None
    """Called once the sandbox runs and the clock has started (before install)."""


SCORER_MODEL_PAUSE = "scorer-model"
"""The pause reason while the scorer waits on the environment's model through the gateway."""


def _pause_while_busy(clock: AttemptClock, recorder: AttemptRecorder, reason: str) -> Callable[[bool], None]:
    """A gateway meter's on_busy: the clock is paused (a pause row) from its first request in flight
    to its last one's end. Scoring-time model calls are the harness's, not the agent's, time."""
    open_pause: list[tuple[PauseInterval, int]] = []

    def busy(on: bool) -> None:
        if on and not open_pause and clock.started_at is not None and clock.stopped_at is None:
            interval = clock.pause(reason)
            open_pause.append((interval, recorder.pause_started(interval)))
        elif not on and open_pause:
            interval, row = open_pause.pop()
            clock.resume(interval)
            recorder.pause_ended(row, interval)

    return busy


def _agent_dir(snapshot_base: Path) -> Path:
    """Beside the attempt's snapshot: an installed agent's model-call bodies and its own session logs."""
    return snapshot_base.with_name(snapshot_base.name + "-agent")


async def _collect_agent_files(agent: Agent, sandbox: Sandbox, dest: Path, recorder: AttemptRecorder) -> None:
    """An installed agent's own transcript (its session files), copied out once it ended."""
    collect = getattr(agent, "collect", None)
    if collect is None:
        return
    copied = await collect(sandbox, dest)
    recorder.event("note", message=f"the agent's own session files: {', '.join(copied) or 'none found'}",
                   data={"agent_session_files": copied})


class AttemptRunner:
    """Runs one planned attempt row to completion."""

    def __init__(
        self,
        store: Store,
        env: Environment,
        *,
        backend: str,
        snapshots_dir: Path,
        progress: Progress | None = None,
        sandbox_factory: SandboxFactory = create_sandbox,
        gpus: list[int] | None = None,
        network: NetworkPolicy | str | None = None,
        final_rule: FinalRule | None = None,
        gateway_credit_usd: float | None = None,
    ) -> None:
        self.store = store
        self.env = env
        self.backend = backend
        self.snapshots_dir = snapshots_dir
        self.progress = progress or (lambda _id, _msg: None)
        self.sandbox_factory = sandbox_factory
        self.gpus = gpus or []
        self.network = None if network is None else parse_network(network)
        """The run's `--network` (rebench.network); None: the profile's default."""
        self.final_rule = final_rule
        """Overrides every profile's `final_score` (`rebench run --final-rule`); None: the profile's."""
        self.gateway_credit_usd = gateway_credit_usd
        """Overrides the profile's gateway credit (`rebench run --env-param credit=USD`); None: the profile's."""

    def _snapshot_base(self, attempt_id: int) -> Path:
        """The attempt's snapshot folder: `attempt-N`, or `attempt-N.2`, ... when a folder of that name
        is already there (left by another database in the same folder, or by one deleted): a
        snapshot is never written over, or into, one it did not take."""
        base = self.snapshots_dir / f"attempt-{attempt_id}"
        number = 1
        while base.exists() or base.is_symlink():
            number += 1
            base = self.snapshots_dir / f"attempt-{attempt_id}.{number}"
        return base

    def _restore_snapshots(self, attempt_id: int, fresh: Path, score_snapshots: ScoreSnapshots | None) -> Path:
        """A resumed attempt keeps its snapshot folder and the snapshots taken at its score calls so far
        (they are candidates for re-scoring); `fresh` when it took none."""
        with self.store.session() as session:
            events = [e.data for e in session.scalars(select(Event).where(
                Event.attempt_id == attempt_id, Event.kind == EventKind.SNAPSHOT).order_by(Event.seq))
                if e.data.get("score_id") is not None and e.data.get("path")]
            raws = {e.id: e.raw for e in session.scalars(select(ScoreEvent).where(
                ScoreEvent.attempt_id == attempt_id, ScoreEvent.kind == ScoreKind.INTERMEDIATE))}
        if not events:
            return fresh
        if score_snapshots is not None:
            score_snapshots.restore(events, raws)
            score_snapshots.root = Path(str(events[0]["path"])).parent
        return Path(str(events[0]["path"])).parent

    def rule_of(self, profile: Profile) -> FinalRule:
        return self.final_rule or profile.final_score

    def _instructions(self, profile_name: str, profile: Profile, paths: Any) -> str:
        """The task text, telling the agent how its final score is taken under this run's rule: in
        the text's own words where it has a `${final_rule_text}` placeholder, else, under
        rescore_best (where "your best call counts" would be wrong), in a paragraph at the end."""
        rule = self.rule_of(profile)
        text = self.env.instructions(profile_name, paths, final_rule=rule)
        if rule != "rescore_best" or self.env.mentions_final_rule():
            return text
        return f"{text}\n\n{final_rule_sentence(rule, profile.rescore)}\n"

    def _update(self, attempt_id: int, **fields: Any) -> None:
        with self.store.session() as session:
            attempt = session.get_one(Attempt, attempt_id)
            for key, value in fields.items():
                setattr(attempt, key, value)

    async def run(self, attempt_id: int, config: AgentConfig, hooks: RunHooks | None = None) -> AttemptOutcome:
        hooks = hooks or RunHooks()
        with self.store.session() as session:
            row = session.get_one(Attempt, attempt_id)
            profile_name, budget_s, seed, campaign_id = row.profile, row.budget_s, row.seed, row.campaign_id
        profile = self.env.profile(profile_name)
        clock = hooks.clock or AttemptClock()
        recorder = AttemptRecorder(self.store, attempt_id, clock)
        snapshot_budget = SnapshotBudget(profile.snapshot.max_bytes, profile.snapshot.max_files)
        rescoring = self.rule_of(profile) == "rescore_best"
        snapshot_base = self._snapshot_base(attempt_id)
        score_snapshots = (ScoreSnapshots(snapshot_base, snapshot_budget)
                           if snapshots_at_calls(self.rule_of(profile), profile) else None)
        if hooks.reattach is not None:
            snapshot_base = self._restore_snapshots(attempt_id, snapshot_base, score_snapshots)
        outcome = AttemptOutcome(attempt_id=attempt_id, status=AttemptStatus.RUNNING, environment=self.env.name,
                                 agent=config.name)
        sandbox: Sandbox | None = None
        gateway: AttemptGateway | None = None
        agent: Agent | None = None
        network = effective_network(self.network, profile.network)
        if hooks.reattach is None:
            self._update(attempt_id, status=AttemptStatus.RUNNING, started_at=_now(), backend=self.backend,
                         pid=os.getpid(), network=network, rebench_version=rebench_version(),
                         env_hash=self.env.content_hash(profile_name))
        else:
            self._update(attempt_id, pid=os.getpid())
        try:
            agent = hooks.agent or load_agent(config)
            spec = SandboxSpec(
                attempt_id=attempt_id, campaign_id=campaign_id, environment=self.env.name, profile=profile_name,
                cpus=profile.resources.cpus, memory_gb=profile.resources.memory_gb, gpus=self.gpus,
                network=network,
            ).model_copy(update=hooks.spec_update)
            prepare = getattr(agent, "prepare_sandbox", None)
            if prepare is not None and hooks.reattach is None:
                # An agent installed in the sandbox (rebench.agents.installed): its image layer, its gateway.
                self.progress(attempt_id, "preparing the agent's image")
                spec = await asyncio.to_thread(prepare, spec, self.env, _agent_dir(snapshot_base) / "model-calls")
            if profile.gateway is not None:
                # A keep-alive (human) sandbox outlives this process: its gateway keeps its socket and
                # tokens for the gateway of the next supervisor to serve again, in a host folder beside
                # the database, never in the gate folder, which the container can write.
                keep_state = (self.store.path.resolve().parent / "human" / f"attempt-{attempt_id}"
                              if spec.keep_alive and spec.gate_dir else None)
                if keep_state is not None:
                    keep_state.mkdir(parents=True, exist_ok=True)
                gateway = AttemptGateway(self.store, attempt_id, self.env, profile.gateway,
                                         assets=assets_dir(self.env, profile_name, build=False),
                                         unix=self.backend != "local", credit_usd=self.gateway_credit_usd,
                                         state_dir=keep_state)
                spec = gateway.sandbox_spec(spec)
            if hooks.reattach is not None:
                self.progress(attempt_id, "reattaching to the sandbox")
                sandbox = await hooks.reattach(spec)
                clock.start()
                if gateway is not None:
                    await gateway.start()
                    gateway.on_scorer_busy(_pause_while_busy(clock, recorder, SCORER_MODEL_PAUSE))
            else:
                sandbox = await self._prepare(attempt_id, profile_name, spec, clock, recorder, hooks, gateway)
            ctx = AttemptContext(
                sandbox=sandbox, recorder=recorder, clock=clock,
                instructions=self._instructions(profile_name, profile, sandbox.paths),
                environment=EnvironmentInfo(
                    name=self.env.name, title=self.env.metadata.title, version=self.env.version,
                    profile=profile_name, direction=profile.direction, score_visible=profile.score_visible,
                    hardware_dependent=profile.hardware_dependent, final_score=self.rule_of(profile),
                ),
                config=config, budget_s=budget_s, seed=seed, score_timeout_s=profile.score_timeout_s,
                reference_dir=self.env.reference_dir if getattr(agent, "uses_reference", False) else None,
                score_snapshots=score_snapshots, score_tokens=gateway,
            )
            if hooks.reattach is None:
                recorder.event("start", instructions=ctx.instructions, agent=config.name, model=config.model,
                               budget_s=budget_s, backend=self.backend)
            else:
                recorder.event("note", message="resumed on the running sandbox by a new harness process")
            self.progress(attempt_id, "agent running")
            await self._run_agent(agent, ctx, sandbox, outcome)
            await _collect_agent_files(agent, sandbox, _agent_dir(snapshot_base), recorder)
            if outcome.status == AttemptStatus.DONE and not await sandbox.alive():
                raise InfrastructureFailure("the sandbox stopped during the attempt")
        except asyncio.CancelledError:
            outcome.status, outcome.error_source = AttemptStatus.INTERRUPTED, ErrorSource.USER
            outcome.error_message = "interrupted by the user"
            raise
        except (InfrastructureFailure, SandboxError) as exc:
            outcome.status, outcome.error_source = AttemptStatus.ERROR, ErrorSource.INFRASTRUCTURE
            outcome.error_message = str(exc)
        except Exception as exc:
            outcome.status, outcome.error_source = AttemptStatus.ERROR, ErrorSource.ENVIRONMENT
            outcome.error_message = f"{type(exc).__name__}: {exc}"
        finally:
            clock.stop()
            try:
                await self._finish(attempt_id, outcome, clock, sandbox, recorder, snapshot_budget,
                                   snapshot_base, score_snapshots, rescoring, gateway)
            finally:
                if gateway is not None:  # after re-scoring: the scorer may call it until then
                    await asyncio.shield(gateway.close())
                release = getattr(agent, "release", None)  # an installed agent's host folder, once the sandbox is gone
                if release is not None:
                    release()
        return outcome

    async def _prepare(self, attempt_id: int, profile_name: str, spec: SandboxSpec, clock: AttemptClock,
                       recorder: AttemptRecorder, hooks: RunHooks, gateway: AttemptGateway | None = None) -> Sandbox:
        """Start the sandbox and the clock, install the environment (and the gateway's files) and
        take the baseline score (with the clock paused for it: harness work)."""
        profile = self.env.profile(profile_name)
        assets = assets_dir(self.env, profile_name, build=False)
        self.progress(attempt_id, "starting sandbox")
        sandbox = self.sandbox_factory(self.backend, spec, self.env)
        await sandbox.start()
        clock.start()
        if hooks.on_started is not None:
            hooks.on_started(sandbox, clock)
        with clock.paused_for("setup") as interval:
            pause_row = recorder.pause_started(interval)
            try:
                if gateway is not None:
                    await gateway.start()
                    gateway.on_scorer_busy(_pause_while_busy(clock, recorder, SCORER_MODEL_PAUSE))
                await install_environment(sandbox, self.env, profile_name, assets)
                if gateway is not None:
                    await gateway.install(sandbox)
                self.progress(attempt_id, "scoring the starting solution")
                baseline = await run_scoring(sandbox, profile.score_timeout_s, gateway)
                recorder.score(baseline, ScoreKind.BASELINE)
            finally:
                clock.resume(interval)
                recorder.pause_ended(pause_row, interval)
        return sandbox

    async def _run_agent(self, agent: Agent, ctx: AttemptContext, sandbox: Sandbox, outcome: AttemptOutcome) -> None:
        """Run the agent under the hard timer: the budget is checked every tick, not
        only when the agent next acts, and cancellation kills its running commands."""
        task = asyncio.create_task(agent.run(ctx))
        try:
            await watch_agent(task, ctx, sandbox, outcome)
        finally:
            outcome.submitted = ctx.submitted.is_set()

    async def _finish(self, attempt_id: int, outcome: AttemptOutcome, clock: AttemptClock,
                      sandbox: Sandbox | None, recorder: AttemptRecorder, budget: SnapshotBudget,
                      base: Path, score_snapshots: ScoreSnapshots | None, rescoring: bool,
                      tokens: AttemptGateway | None = None) -> None:
        """Snapshot, re-score where the rule asks (rebench.scoring.rescore), stop and write the final
        row; shielded so an interrupt cannot skip it. An interrupt before or during the re-scoring
        leaves a row whose final number is RE-Bench's rule, marked so (final_rule = "best")."""

        async def finish() -> None:
            snapshot: str | None = None
            summary: RescoreSummary | None = None
            cancelled = False
            if sandbox is not None:
                killed: int | None = None
                kill_error: str | None = None
                split = self._profile_of(attempt_id)
                heldout = split.final_split is not None
                if rescoring or heldout:  # nothing the agent started may run on while its solution is scored
                    try:
                        killed = await sandbox.kill_agent_processes()
                    except Exception as exc:
                        kill_error = f"{type(exc).__name__}: {exc}"
                target = base / "final" if rescoring or score_snapshots is not None else base
                try:
                    report = await sandbox.copy_out(sandbox.paths.solution, str(target), budget)
                except Exception as exc:
                    with contextlib.suppress(Exception):
                        recorder.event("snapshot", note=f"snapshot failed: {type(exc).__name__}: {exc}")
                else:
                    snapshot = str(target)
                    with contextlib.suppress(Exception):
                        recorder.event("snapshot", path=snapshot, note=report.note(), **report.model_dump())
                if heldout:  # before re-scoring, which lays other solutions into the folder
                    with contextlib.suppress(Exception):
                        await score_heldout(sandbox, split, recorder, tokens=tokens, skip=heldout_skip(
                            outcome.status, outcome.error_source, kill_error),
                            solution=heldout_solution_of(self.store, attempt_id, self.rule_of(split), split,
                                                         score_snapshots))
                if rescoring:
                    try:
                        summary = await rescore_attempt(self.store, self.env, self.rule_of, self.progress, attempt_id,
                                                        outcome, sandbox, recorder, score_snapshots, snapshot,
                                                        kill_error, tokens)
                    except asyncio.CancelledError:
                        cancelled = True
                        outcome.status, outcome.error_source = AttemptStatus.INTERRUPTED, ErrorSource.USER
                        outcome.error_message = "interrupted by the user while re-scoring"
                        with contextlib.suppress(Exception):
                            recorder.event("note", message="re-scoring interrupted: the final score is "
                                           "RE-Bench's rule (best intermediate score)")
                    if summary is not None:
                        summary.agent_processes_killed = killed
                        with contextlib.suppress(Exception):
                            recorder.event("note", message="re-scored", data=summary.model_dump())
                with contextlib.suppress(Exception):
                    await sandbox.stop()
            try:
                recorder.close()  # every buffered event is committed before the status changes
            finally:
                finalize_row(self.store, self.env, self.rule_of, attempt_id, outcome, clock, snapshot, summary,
                             rescoring)
            if cancelled:
                raise asyncio.CancelledError

        await asyncio.shield(finish())

    def _profile_of(self, attempt_id: int) -> Profile:
        with self.store.session() as session:
            return self.env.profile(session.get_one(Attempt, attempt_id).profile)
