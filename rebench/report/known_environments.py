"""The seven RE-Bench environments as data, for imported rows whose folder is not (yet) here.

When an environment folder exists its metadata wins (`metr_task_family`, `best_of_k`);
this table only fills the gap for METR's exported runs. `score_hidden` marks the
environment whose score the agent cannot see (best-of-k is then a random pick).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.errors import RebenchError

if TYPE_CHECKING:  # numpy, behind the estimators, costs a read-only command about 0.15 s
    from rebench.report.estimators import BestOfK

METR_FAMILY_PREFIX = "ai_rd_"


@dataclass(frozen=True)
class KnownEnvironment:
    name: str
    title: str
    metr_task_family: str
    score_hidden: bool = False


RE_BENCH_ENVIRONMENTS: tuple[KnownEnvironment, ...] = (
    KnownEnvironment("optimize_llm_foundry", "Optimize LLM Foundry", "ai_rd_optimize_llm_foundry"),
    KnownEnvironment("triton_cumsum", "Optimize a Kernel", "ai_rd_triton_cumsum"),
    KnownEnvironment("fix_embedding", "Fix Embedding", "ai_rd_fix_embedding"),
    KnownEnvironment("small_scaling_law", "Scaling Law Experiment", "ai_rd_small_scaling_law", score_hidden=True),
    KnownEnvironment("restricted_mlm", "Restricted Architecture MLM", "ai_rd_restricted_mlm"),
    KnownEnvironment("nanogpt_chat_rl", "Finetune GPT-2 for QA", "ai_rd_nanogpt_chat_rl"),
    KnownEnvironment(
        "rust_codecontests_inference",
        "Scaffolding for Rust CodeContests",
        "ai_rd_rust_codecontests_inference",
    ),
)

_BY_NAME = {env.name: env for env in RE_BENCH_ENVIRONMENTS}
_BY_FAMILY = {env.metr_task_family: env for env in RE_BENCH_ENVIRONMENTS}


class EnvironmentInfo:
    """Looks environments up in the folder registry first, then in the built-in table."""

    def __init__(self, registry: EnvironmentRegistry | None = None) -> None:
        self.registry = registry or EnvironmentRegistry()
        self._folders: dict[str, Environment | None] = {}
        self._names: list[str] | None = None
        self._families: dict[str, str] = {}

    def names(self) -> list[str]:
        if self._names is None:
            self._names = self.registry.names()
        return self._names

    def folder(self, name: str) -> Environment | None:
        if name not in self._folders:
            self._folders[name] = self.registry.get(name) if name in self.names() else None
        return self._folders[name]

    def name_for_family(self, family: str) -> str:
        """Our environment name for a METR task family (`ai_rd_triton_cumsum` -> `triton_cumsum`)."""
        if not self._families:
            for name in self.names():
                env = self.folder(name)
                if env is not None and env.metadata.metr_task_family:
                    self._families[env.metadata.metr_task_family] = name
        if family in self._families:
            return self._families[family]
        known = _BY_FAMILY.get(family)
        if known is not None:
            return known.name
        if not family.startswith(METR_FAMILY_PREFIX) or len(family) == len(METR_FAMILY_PREFIX):
            raise RebenchError(f"task family {family!r} is not a METR RE-Bench family (ai_rd_*)")
        return family[len(METR_FAMILY_PREFIX) :]

    def best_of_k(self, name: str) -> BestOfK:
        env = self.folder(name)
        if env is not None:
            return env.metadata.best_of_k
        known = _BY_NAME.get(name)
        return "mean" if known is not None and known.score_hidden else "max"

    def title(self, name: str) -> str:
        env = self.folder(name)
        if env is not None:
            return env.metadata.title
        known = _BY_NAME.get(name)
        return known.title if known is not None else name


def default_info() -> EnvironmentInfo:
    """A fresh lookup of the environments folder in force (`REBENCH_ENVIRONMENTS` may change)."""
    return EnvironmentInfo()
