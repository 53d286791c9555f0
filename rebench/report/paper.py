"""The RE-Bench paper's printed human figures, shown next to ours and labelled as the paper's.

Source: Wijk et al., arXiv:2411.15114 (v1 Tables 5, 6 and 8; abstract). These are
printed numbers, not computed from any data in the store.
"""

from __future__ import annotations

from dataclasses import dataclass

PAPER_CITATION = "RE-Bench paper (arXiv:2411.15114), printed figures"


@dataclass(frozen=True)
class PaperHumanSummary:
    runs: int = 71
    experts: int = 61
    mean_normalized: float = 0.64
    fraction_nonzero: float = 0.82
    fraction_at_or_above_reference: float = 0.24


@dataclass(frozen=True)
class PaperEnvironmentRow:
    environment: str
    human_runs: int
    best_normalized: float


PAPER_HUMANS = PaperHumanSummary()

PAPER_ENVIRONMENTS: tuple[PaperEnvironmentRow, ...] = (
    PaperEnvironmentRow("small_scaling_law", 8, 1.17),
    PaperEnvironmentRow("triton_cumsum", 9, 1.81),
    PaperEnvironmentRow("fix_embedding", 13, 1.05),
    PaperEnvironmentRow("rust_codecontests_inference", 11, 1.33),
    PaperEnvironmentRow("restricted_mlm", 11, 1.78),
    PaperEnvironmentRow("optimize_llm_foundry", 8, 0.97),
    PaperEnvironmentRow("nanogpt_chat_rl", 11, 1.43),
)
