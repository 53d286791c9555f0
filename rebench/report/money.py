"""Score against money (the paper's Fig. 11) and tokens per hour for the agents table.

Money is what an attempt recorded: its agent's model cost plus its gateway requests (own
attempts) or METR's `dollar_equivalent` (imported runs; METR's file gives it for human runs
only). An attempt with no recorded cost is left off the plot and counted in its title and the
report's notes: a missing cost is not a free attempt.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from rebench.report.data import HUMAN_AGENT, RunRecord
from rebench.report.rows import Report


@dataclass(frozen=True)
class Spend:
    """The attempts a money plot can place, per agent, and those it cannot."""

    priced: dict[str, list[RunRecord]]
    unpriced: dict[str, int]

    def note(self) -> str | None:
        if not self.unpriced:
            return None
        left = ", ".join(f"{agent} {n}" for agent, n in sorted(self.unpriced.items()))
        return (f"score vs money leaves out {sum(self.unpriced.values())} attempt(s) without a recorded cost "
                f"({left}); METR's file gives a cost for human runs only")


def unique_runs(report: Report) -> list[RunRecord]:
    """Each attempt once (human attempts are both runs and the yardstick)."""
    return list({r.attempt_id: r for r in report.data.runs + report.data.humans}.values())


def spend(runs: Sequence[RunRecord]) -> Spend:
    priced: dict[str, list[RunRecord]] = defaultdict(list)
    unpriced: dict[str, int] = defaultdict(int)
    for run in runs:
        if run.cost_usd is not None and run.cost_usd > 0:
            priced[run.agent].append(run)
        else:
            unpriced[run.agent] += 1
    return Spend(dict(priced), dict(unpriced))


def score_vs_money(report: Report) -> bytes | None:
    """Each priced attempt's normalized score against its dollars (log scale), one colour per agent,
    with each agent's mean as a large marker; None when no attempt has a cost."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    from rebench.report.plots import _mark_off_scale, _png, _report_colors, robust_top

    found = spend(unique_runs(report))
    if not found.priced:
        return None
    colors = _report_colors(report)
    runs = [r for rows in found.priced.values() for r in rows]
    top = robust_top([r.score for r in runs])
    figure, axes = plt.subplots(figsize=(9, 5.5))
    for agent, rows in sorted(found.priced.items(), key=lambda item: (item[0] != HUMAN_AGENT, item[0])):
        xs, ys = [r.cost_usd or 0.0 for r in rows], [r.score for r in rows]
        color = colors[agent]
        axes.scatter(xs, [min(y, top) for y in ys], s=12, alpha=0.45, color=color, label=f"{agent} ({len(rows)})")
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        axes.scatter([mean_x], [min(mean_y, top)], s=90, marker="D", color=color, edgecolors="white", zorder=4)
        _mark_off_scale(axes, xs, ys, top, color)
    axes.set_xscale("log")
    dollars = FuncFormatter(lambda value, _: f"${value:,.0f}" if value >= 1 else f"${value:.2g}")
    axes.xaxis.set_major_formatter(dollars)
    axes.xaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
    axes.xaxis.set_minor_formatter(dollars)
    axes.tick_params(axis="x", which="minor", labelsize=7)
    axes.set_xlabel("dollars spent per attempt (log scale)")
    axes.set_ylabel("normalized score (0 = start, 1 = reference)")
    axes.set_ylim(0, top)
    title = "Score vs money per attempt (diamond: the agent's mean)"
    left = sum(found.unpriced.values())
    if left:
        title += f"\n{left} attempt(s) without a recorded cost left out (see notes)"
    axes.set_title(title, fontsize=10)
    axes.grid(True, alpha=0.3, which="both")
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="agent (attempts)",
                title_fontsize=7)
    return _png(figure)


def tokens_per_hour(runs: Sequence[RunRecord]) -> dict[str, float | None]:
    """Per agent: its model tokens over its working hours, over the attempts that recorded both;
    None where none did (imported runs, agents without a model)."""
    tokens: dict[str, int] = defaultdict(int)
    hours: dict[str, float] = defaultdict(float)
    agents = {r.agent for r in runs}
    for run in runs:
        if run.tokens is not None and run.working_s:
            tokens[run.agent] += run.tokens
            hours[run.agent] += run.working_s / 3600
    return {agent: (tokens[agent] / hours[agent] if hours.get(agent) else None) for agent in agents}
