"""Campaigns: plan attempt rows for environments x agents x budget x k, then run them.

Planning writes every attempt row in one transaction (all or nothing). Running
leases CPU slots and GPU ids (rebench.scheduler), runs attempts with the AttemptRunner, retries an
attempt once when the infrastructure failed under it, and on interrupt marks
what did not finish as `interrupted`. A failure that would fail every attempt alike
(the provider rejected the API key) stops the campaign: no further attempt starts
its sandbox, and the run ends with a one-line error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator
from sqlalchemy import select

from rebench.agents.base import AgentConfig
from rebench.attempt_outcome import AttemptOutcome
from rebench.budget import parse_duration
from rebench.environments.metadata import Profile
from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.network import NetworkPolicy, effective_network, parse_network
from rebench.runner import AttemptRunner, Progress, SandboxFactory
from rebench.sandboxes import create_sandbox
from rebench.scheduler import resume as scheduler_resume
from rebench.scheduler.queue import run_campaign_queue
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus, Campaign, CampaignStatus, ErrorSource

MAX_INFRA_RETRIES = 1


class CampaignSpec(BaseModel):
    """What to run: every environment x `k` attempts of each agent under one budget; stored with the campaign.

    Out-of-range values raise RebenchError (one line naming the value), not pydantic's
    ValidationError, so a bad spec fails the same way from the API and the command line.
    """

    environments: list[str]
    agent: AgentConfig
    more_agents: list[AgentConfig] = Field(
        default_factory=list, description="further agents run beside `agent` on the same environments, budget "
                                          "and seeds (`--agent modular,aide`), so scaffolds compare side by side")
    profile: str = "tiny"
    budget_s: float = Field(description="working time per attempt in seconds, or a duration like '30m'")
    k: int = 1
    backend: str | None = Field(None, description="local or docker; None: docker if an engine answers")
    seed: int = Field(0, description="seed of the first attempt of each environment; attempt i gets seed+i")
    parallel: int = 1
    gpus: list[int] = Field(default_factory=list, description="GPU device ids the scheduler may lease")
    network: NetworkPolicy | None = Field(
        None, description="the sandboxes' network (rebench.network): none, or full (a bridged network of the "
                          "attempt's own; Docker only); None: none, unless a profile asks for network")
    final_rule: Literal["best", "last", "rescore_best"] | None = Field(
        None, description="override every profile's final_score: best, last or rescore_best "
                          "(re-score the best solutions when each attempt ends)")
    executor: Literal["local", "ray"] = Field(
        "local", description="local: this host's queue; ray: Ray tasks on a cluster (rebench.scheduler.ray_executor)")
    ray_address: str | None = Field(None, description="the Ray cluster to join; None: start one on this machine")
    ray_timeout_s: float | None = Field(
        None, description="how long joining the Ray cluster may take before the run fails (nothing written); "
                          "None: 30 s")
    env_params: dict[str, str] = Field(
        default_factory=dict, description="environment parameters (`--env-param KEY=VALUE`): `credit` (USD) "
                                          "overrides the gateway's credit; a key of the profile's params "
                                          "overrides it in the instructions and the scorer's params")

    @model_validator(mode="after")
    def _ray_address_needs_ray(self) -> CampaignSpec:
        if self.ray_address is not None and self.executor != "ray":
            raise RebenchError(f"--ray-address {self.ray_address!r} is used only with --executor ray "
                               f"(this run's executor: {self.executor})")
        if self.ray_timeout_s is not None and self.executor != "ray":
            raise RebenchError(f"--ray-timeout {self.ray_timeout_s:g}s is used only with --executor ray "
                               f"(this run's executor: {self.executor})")
        return self

    @field_validator("ray_timeout_s", mode="before")
    @classmethod
    def _ray_timeout(cls, value: Any) -> Any:
        bad = RebenchError(f"invalid --ray-timeout {value!r}: use a duration like 30s or 2m")
        if isinstance(value, str):
            try:
                return parse_duration(value)
            except RebenchError:
                raise bad from None
        if isinstance(value, int | float) and not value > 0:  # also refuses nan
            raise bad
        return value

    @field_validator("final_rule", mode="before")
    @classmethod
    def _final_rule(cls, value: Any) -> Any:
        if value is not None and value not in ("best", "last", "rescore_best"):
            raise RebenchError(f"invalid --final-rule {value!r}; allowed: best, last, rescore_best")
        return value

    @field_validator("network", mode="before")
    @classmethod
    def _network(cls, value: Any) -> Any:
        return None if value is None else parse_network(value)

    @field_validator("environments")
    @classmethod
    def _some_environments(cls, names: list[str]) -> list[str]:
        names = [name.strip() for name in names if name.strip()]
        if not names:
            raise RebenchError("--env needs at least one environment name")
        return names

    @field_validator("budget_s", mode="before")
    @classmethod
    def _budget(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_duration(value)
        if isinstance(value, int | float) and not value > 0:  # also refuses nan
            raise RebenchError(f"invalid budget {value!r}: must be a positive number of seconds")
        return value

    @field_validator("k", "parallel")
    @classmethod
    def _at_least_one(cls, value: int, info: ValidationInfo) -> int:
        if value < 1:
            flag = "-k" if info.field_name == "k" else f"--{info.field_name}"
            raise RebenchError(f"invalid {flag} {value}: must be at least 1")
        return value

    @field_validator("gpus")
    @classmethod
    def _device_ids(cls, ids: list[int]) -> list[int]:
        if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
            raise RebenchError(f"invalid --gpus {ids}: use distinct device ids like 0,1,2")
        return ids

    @field_validator("executor", mode="before")
    @classmethod
    def _executor(cls, value: Any) -> Any:
        if value not in ("local", "ray"):
            raise RebenchError(f"invalid --executor {value!r}; allowed: local, ray")
        return value

    @field_validator("env_params")
    @classmethod
    def _env_param_names(cls, params: dict[str, str]) -> dict[str, str]:
        for key in params:
            if not key.strip():
                raise RebenchError("invalid --env-param: an empty KEY; use KEY=VALUE")
        return params

    @field_validator("more_agents")
    @classmethod
    def _distinct_agents(cls, more: list[AgentConfig], info: ValidationInfo) -> list[AgentConfig]:
        first = info.data.get("agent")
        names = ([first.name] if isinstance(first, AgentConfig) else []) + [a.name for a in more]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise RebenchError(f"agent {twice[0]!r} is named twice in --agent; name each agent once")
        return more

    @property
    def agents(self) -> list[AgentConfig]:
        """Every agent of the campaign, in the order given."""
        return [self.agent, *self.more_agents]

    def agent_config(self, name: str) -> AgentConfig:
        """The configuration of the campaign's agent called `name` (an attempt row's `agent`)."""
        for config in self.agents:
            if config.name == name:
                return config
        raise RebenchError(f"agent {name!r} is not in this campaign; its agents: "
                           f"{', '.join(a.name for a in self.agents)}")

    @property
    def chosen_backend(self) -> str:
        """The backend attempts run on; rebench.api.run_campaign fills it in before planning."""
        if self.backend is None:
            raise RebenchError("the campaign's backend is not chosen yet: set backend to 'local' or 'docker'")
        return self.backend


CREDIT_PARAM = "credit"


def _typed_like(current: Any, key: str, text: str) -> Any:
    """`text` as a value of the type the profile declares for `key` (a number stays a number)."""
    try:
        if isinstance(current, bool):
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return text.lower() in ("true", "1", "yes")
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
        if isinstance(current, str):
            return text
        return json.loads(text)
    except ValueError:
        raise RebenchError(f"invalid --env-param {key}={text!r}: expected a value like {current!r}") from None


def apply_env_params(env: Environment, profile: str, params: dict[str, str]) -> tuple[Environment, float | None]:
    """The environment with the run's `--env-param` values in the profile's params, and the
    gateway credit override (`credit`, USD). Params change what the instructions, the scorer and
    the build see (build.py reads them through rebench.kit.buildutil.profile_params; the assets and
    images of changed params are built apart from the declared ones). Unknown keys: RebenchError
    naming the allowed ones."""
    spec: Profile = env.profile(profile)
    allowed = ([CREDIT_PARAM] if spec.gateway is not None else []) + sorted(spec.params)
    unknown = [key for key in params if key not in allowed]
    if unknown:
        raise RebenchError(f"unknown --env-param {unknown[0]!r} for {env.name} ({profile}); allowed: "
                           f"{', '.join(allowed) if allowed else 'none'}")
    credit: float | None = None
    if CREDIT_PARAM in params:
        try:
            credit = float(params[CREDIT_PARAM])
        except ValueError:
            credit = -1.0
        if not credit >= 0:  # also refuses nan
            raise RebenchError(f"invalid --env-param credit={params[CREDIT_PARAM]!r}: a number of US dollars >= 0")
    overrides = {k: _typed_like(spec.params[k], k, v) for k, v in params.items() if k in spec.params}
    if not overrides:
        return env, credit
    new_profile = spec.model_copy(update={"params": {**spec.params, **overrides}})
    metadata = env.metadata.model_copy(update={"profiles": {**env.metadata.profiles, profile: new_profile}})
    return Environment(root=env.root, metadata=metadata, overridden=env.overridden | {profile}), credit


def plan_campaign(store: Store, spec: CampaignSpec, registry: EnvironmentRegistry) -> tuple[int, list[int]]:
    """Validate everything first, then write the campaign and its queued attempts at once."""
    envs = [registry.get(name) for name in spec.environments]
    for env in envs:
        env.profile(spec.profile)
        apply_env_params(env, spec.profile, spec.env_params)
    with store.session() as session:
        campaign = Campaign(spec=spec.model_dump(mode="json"), status=CampaignStatus.RUNNING)
        session.add(campaign)
        session.flush()
        ids = []
        for env in envs:
            for agent in spec.agents:
                for index in range(spec.k):
                    attempt = Attempt(
                        campaign_id=campaign.id, source="own", environment=env.name, env_version=env.version,
                        profile=spec.profile, agent=agent.name, model=agent.model, budget_s=spec.budget_s,
                        seed=spec.seed + index, status=AttemptStatus.QUEUED, backend=spec.chosen_backend,
                        network=effective_network(spec.network, env.profile(spec.profile).network),
                    )
                    session.add(attempt)
                    session.flush()
                    ids.append(attempt.id)
        return campaign.id, ids


def recover_orphans(store: Store) -> int:
    """Attempts left `running` by a harness that died (SIGKILL, power loss) are marked `interrupted`;
    a live holder's lease heartbeat keeps its attempts, human ones are left alone (rebench.scheduler.resume)."""
    return scheduler_resume.recover_orphans(store)


class CampaignRunner:
    def __init__(
        self,
        store: Store,
        registry: EnvironmentRegistry,
        *,
        snapshots_dir: Path,
        progress: Progress | None = None,
        sandbox_factory: SandboxFactory = create_sandbox,
        on_outcome: Callable[[AttemptOutcome], None] | None = None,
        attempt_runner: type[AttemptRunner] = AttemptRunner,
    ) -> None:
        self.attempt_runner = attempt_runner
        """AttemptRunner, or the Ray executor's (rebench.scheduler.ray_executor), which runs it on a worker."""
        self.store = store
        self.registry = registry
        self.snapshots_dir = snapshots_dir
        self.progress = progress
        self.sandbox_factory = sandbox_factory
        self.on_outcome = on_outcome or (lambda _o: None)

    async def run(self, campaign_id: int, spec: CampaignSpec) -> list[AttemptOutcome]:
        outcomes: list[AttemptOutcome] = []
        stopped: list[str] = []

        async def one(attempt_id: int, env: Environment, lease: list[int]) -> None:
            with self.store.session() as session:  # a campaign may run several agents: each row names its own
                agent = session.scalars(select(Attempt.agent).where(Attempt.id == attempt_id)).one()
            outcome = await self._run_with_retry(attempt_id, env, spec, lease, spec.agent_config(agent))
            if outcome.stop_campaign and not stopped:
                stopped.append(outcome.stop_campaign)
            outcomes.append(outcome)
            self.on_outcome(outcome)

        try:  # the queue and GPU leases: rebench.scheduler.queue
            await run_campaign_queue(self.store, self.registry, campaign_id, gpus=spec.gpus, parallel=spec.parallel,
                                     start=one, stopped=lambda: bool(stopped), cluster=spec.executor == "ray")
        except BaseException:
            self._mark_unfinished(campaign_id)
            raise
        if stopped:
            self._mark_unfinished(campaign_id, f"not run: the campaign stopped ({stopped[0]})")
            raise RebenchError(f"campaign {campaign_id} stopped: {stopped[0]}")
        self._set_campaign_status(campaign_id, CampaignStatus.DONE)
        return outcomes

    async def _run_with_retry(self, attempt_id: int, env: Environment, spec: CampaignSpec,
                              gpus: list[int], agent: AgentConfig) -> AttemptOutcome:
        env, credit = apply_env_params(env, spec.profile, spec.env_params)
        runner = self.attempt_runner(self.store, env, backend=spec.chosen_backend, snapshots_dir=self.snapshots_dir,
                               progress=self.progress, sandbox_factory=self.sandbox_factory, gpus=gpus,
                               network=spec.network, final_rule=spec.final_rule, gateway_credit_usd=credit)
        outcome = await runner.run(attempt_id, agent)
        retries = 0
        while (outcome.error_source == ErrorSource.INFRASTRUCTURE and retries < MAX_INFRA_RETRIES
               and not outcome.stop_campaign):  # a failure that stops the campaign fails a retry alike
            retries += 1
            attempt_id = self._plan_retry(attempt_id)
            outcome = await runner.run(attempt_id, agent)
        return outcome

    def _plan_retry(self, failed_id: int) -> int:
        """The failed try is kept but no longer counted; its retry is a new row pointing back at it."""
        with self.store.session() as session:
            failed = session.get_one(Attempt, failed_id)
            failed.counted = False
            retry = scheduler_resume.retry_row(failed)
            session.add(retry)
            session.flush()
            return retry.id

    def _mark_unfinished(self, campaign_id: int,
                         reason: str = "the campaign was interrupted before it ran") -> None:
        with self.store.session() as session:
            unfinished = (AttemptStatus.QUEUED, AttemptStatus.RUNNING)
            for attempt in session.scalars(select(Attempt).where(
                    Attempt.campaign_id == campaign_id, Attempt.status.in_(unfinished))):
                attempt.status, attempt.error_source = AttemptStatus.INTERRUPTED, ErrorSource.USER
                attempt.error_message = attempt.error_message or reason
            campaign = session.get_one(Campaign, campaign_id)
            campaign.status = CampaignStatus.INTERRUPTED

    def _set_campaign_status(self, campaign_id: int, status: CampaignStatus) -> None:
        with self.store.session() as session:
            session.get_one(Campaign, campaign_id).status = status
