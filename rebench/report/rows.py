"""What a report is made of: its settings, its score@k rows, standings, summaries and headline rows
(rebench.report.compute builds them; render, plots and money read them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from rebench.gateway.usage import MeterUsage
from rebench.report.bootstrap import (
    DEFAULT_N_BOOTSTRAP,
    DEFAULT_SEED,
)
from rebench.report.data import ReportData
from rebench.report.estimators import EstimatorName

ALL = "all"
PLAUSIBLE_MAX = 2.0  # the paper never saw a normalized score above 2 after its review
HEADLINE_TOTALS_S = (7200.0, 28800.0, 57600.0, 115200.0)  # the headline table: 2h, 8h, 16h, 32h
CURVE_MAX_TOTAL_S = 64 * 3600.0  # the plot's x range: the paper's budgets up to Claude's 30min@128


class ReportSettings(BaseModel):
    """How the numbers were computed; printed with every report."""

    estimator: EstimatorName = "expected_max"
    n_bootstrap: int = Field(DEFAULT_N_BOOTSTRAP, ge=1)
    seed: int = DEFAULT_SEED
    total_budgets_s: tuple[float, ...]
    compare_at_s: float = 28800.0
    exclude_above: float | None = Field(None, description="leave out runs scoring above this; None keeps all")
    strict: bool = Field(False, description="leave out estimates with k above the runs behind them")


class ScoreRow(BaseModel):
    """One estimate: one environment (or `all`, the equal-weight average) at one allocation.

    Each row is self-describing (estimator, resamples, seed), so `--json` and the CSV are
    just a list of rows. `n`, `mean` and `best` describe the run scores behind the estimate.
    """

    environment: str
    agent: str
    source: str
    budget_s: float = Field(description="per-attempt budget of the attempts used")
    k: int
    total_s: float = Field(description="total budget per environment: k x per-attempt, or the cut length")
    truncated: bool = False
    estimator: str
    n_bootstrap: int
    seed: int
    best_of_k: str = Field(description="max, mean (score hidden), or mixed for `all`")
    point: float
    low: float = Field(description="2.5th percentile of the bootstrap replicates")
    high: float = Field(description="97.5th percentile of the bootstrap replicates")
    n: int = Field(description="runs used (summed over environments for `all`)")
    min_n: int = Field(description="fewest runs of any environment; k above it is capped there")
    envs: int
    mean: float = Field(description="mean run score (for `all`: averaged over environments)")
    best: float = Field(description="best run score (for `all`: averaged over environments)")
    anchors: str = Field(description="anchors behind the scores: declared, calibrated, imported")
    best_allocation: bool = Field(False, description="the highest estimate at this total budget")
    comparable: bool = Field(
        True,
        description="False: covers fewer environments than another allocation of this agent at this "
        "total, so it is not compared with them",
    )
    not_submitted: int = Field(0, description="runs behind the row that ended without submitting")
    above_2: int = Field(0, description="runs behind the row scoring above 2 (implausible after review)")
    rescored: int = Field(0, description="runs behind the row whose final score was re-scored (rescore_best)")
    rule_mean: float | None = Field(
        None, description="where runs were re-scored: `mean` by RE-Bench's own rule (the best single score call)"
    )
    original_mean: float | None = Field(
        None, description="with `report --rescored RUN`: `mean` as originally scored (the re-scored runs' own scores)"
    )
    heldout_mean: float | None = Field(None, description="final on held-out: the mean normalized held-out final of "
                                       "the runs that have one (profiles with `final_split`; for `all`: averaged "
                                       "over environments, when every one has it)")
    heldout_anchors: str | None = Field(None, description="kinds of the held-out split's anchors behind "
                                        "`heldout_mean`: calibrated, declared")
    # The agent's held-out columns (AgentSummary's, same names and values) on each of its rows: the
    # rows are all that `--json`, the CSV and the analysis frame hold, and they have no per-agent table.
    heldout_gap: float | None = Field(None, description="the agent's mean of best intermediate minus held-out "
                                      "final (normalized), over all its attempts in the report")
    heldout_gap_low: float | None = Field(None, description="the agent's gap: 2.5th bootstrap percentile")
    heldout_gap_high: float | None = Field(None, description="the agent's gap: 97.5th bootstrap percentile")
    heldout_n: int = Field(0, description="the agent's attempts with a held-out final (behind the gap)")
    probing: int = Field(0, description="of those, flagged for probing (held-out final more than the split's "
                         "margin below the best intermediate score)")
    calls_per_hour: float | None = Field(None, description="the agent's mean intermediate score calls per "
                                         "working hour (own attempts)")
    human_percentile: float | None = Field(
        None, description="for an agent's best `all` row: the human 8 h percentile it matches"
    )
    gateway_requests: int = Field(0, description="the agents' requests through the environments' model gateway, "
                                  "summed over the runs behind the row (refused ones included)")
    gateway_refused: int = Field(0, description="of those, refused (credit spent, another model, ...)")
    gateway_input_tokens: int = 0
    gateway_output_tokens: int = 0
    gateway_cost_usd: float = Field(0.0, description="what those requests cost (notional prices for a local model)")


class Standing(BaseModel):
    """An agent's best allocation at one total budget, located among the human 8 h scores."""

    agent: str
    source: str
    total_s: float
    allocation: str
    point: float
    human_percentile: float
    envs: int


class AttemptSummary(BaseModel):
    """Per environment, agent and per-attempt budget: how many attempts and how they scored."""

    environment: str
    agent: str
    source: str
    budget_s: float
    n: int
    not_submitted: int = Field(0, description="attempts that ended without submitting")
    mean: float
    best: float
    anchors: str = Field(description="kinds of anchors behind the normalized scores: declared, calibrated, imported")
    rescored: int = Field(0, description="attempts whose final score was re-scored (final_rule = rescore_best)")
    rule_mean: float | None = Field(None, description="mean normalized score by RE-Bench's own rule (best "
                                    "intermediate score); set when some attempts were re-scored")
    gateway: MeterUsage | None = Field(None, description="the agent's model gateway usage, summed over the attempts")
    original_mean: float | None = Field(None, description="with `report --rescored RUN`: `mean` as originally scored")
    heldout_mean: float | None = Field(None, description="final on held-out: mean normalized held-out final score "
                                       "of the attempts that have one (rebench.report.heldout)")
    heldout_n: int = 0
    heldout_anchors: str | None = Field(None, description="kinds of the held-out split's anchors behind "
                                        "`heldout_mean`: calibrated, declared")


class AgentSummary(BaseModel):
    """Per agent: attempts, how many ended without submitting or score above 2, and what those do to
    its headline number (the best allocation at the report's `--at` total)."""

    agent: str
    source: str
    attempts: int
    not_submitted: int
    above_2: int
    total_s: float
    allocation: str | None
    score: float | None
    allocation_without_above_2: str | None = None
    score_without_above_2: float | None = None
    heldout_gap: float | None = Field(None, description="mean of best intermediate minus held-out final (normalized)")
    heldout_gap_low: float | None = None
    heldout_gap_high: float | None = None
    heldout_n: int = 0
    probing: int = Field(0, description="attempts whose held-out final is more than the split's margin below "
                         "their best intermediate score")
    calls_per_hour: float | None = Field(None, description="mean intermediate score calls per working hour")


class HeadlineRow(BaseModel):
    """Best agent against human experts at one total time budget per environment."""

    total_s: float
    agent: str | None = None
    agent_source: str | None = None
    allocation: str | None = None
    agent_score: float | None = None
    agent_envs: int = 0
    human_allocation: str | None = None
    human_score: float | None = None
    human_envs: int = 0
    ratio: float | None = None
    same_environments: bool = False
    human_data: str = Field(description="whether humans have data at this total, and why not")


class HumanSummary(BaseModel):
    """Our human 8 h attempts in the shape of the paper's printed figures."""

    runs: int
    mean: float
    fraction_nonzero: float
    fraction_at_or_above_reference: float
    per_environment: dict[str, tuple[int, float]]  # environment -> (runs, best)


class HumanAttemptRow(BaseModel):
    """One own human attempt: its expert and working time with and without pause corrections."""

    attempt_id: int
    environment: str
    expert: str
    budget_s: float
    score: float
    working_s: float = Field(description="as recorded (the clock the budget was enforced on)")
    corrected_working_s: float = Field(description="without the pauses added afterwards by `rebench human adjust`")
    corrections: int


@dataclass
class Report:
    settings: ReportSettings
    rows: list[ScoreRow]
    curves: list[ScoreRow]  # `all` rows at k = 1..128 (and cut lengths), for the plot
    standings: list[Standing]
    summary: list[AttemptSummary]
    humans: HumanSummary | None
    data: ReportData
    notes: list[str]
    agents: list[AgentSummary] = field(default_factory=list)
    headline: list[HeadlineRow] = field(default_factory=list)
    human_attempts: list[HumanAttemptRow] = field(default_factory=list)
