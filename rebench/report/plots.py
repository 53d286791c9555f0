"""Report plots with matplotlib's Agg backend, returned as PNG bytes for inlining in HTML."""

from __future__ import annotations

import io
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from rebench.budget import format_duration
from rebench.report.compute import ALL, Report, ScoreRow
from rebench.report.data import HUMAN_AGENT
from rebench.report.known_environments import EnvironmentInfo, default_info

HUMAN_COLOR = "black"


def _palette() -> list[tuple[float, ...]]:
    """Twenty distinct colours: the paired tab20 shades, dark ones first."""
    colors = list(plt.get_cmap("tab20").colors)  # type: ignore[attr-defined]
    return (colors[0::2] + colors[1::2]) * 3


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def _group_label(agent: str, source: str, budget_s: float, envs: int, max_envs: int) -> str:
    label = f"{agent} ({format_duration(budget_s)} attempts, {source})"
    return label if envs >= max_envs else f"{label}, {envs} envs"


def score_vs_budget(report: Report) -> bytes | None:
    """Average normalized score against total time budget (log x), one band per agent and attempt length."""
    curves: dict[tuple[str, str, float], list[ScoreRow]] = defaultdict(list)
    for row in report.curves:
        curves[(row.agent, row.source, row.budget_s)].append(row)
    if not curves:
        return None
    max_envs = max(row.envs for row in report.curves)
    figure, axes = plt.subplots(figsize=(9, 5.5))
    colors = iter(_palette())
    for (agent, source, budget_s), rows in sorted(curves.items()):
        rows.sort(key=lambda r: r.total_s)
        color = HUMAN_COLOR if agent == HUMAN_AGENT else next(colors)
        hours = [r.total_s / 3600 for r in rows]
        label = _group_label(agent, source, budget_s, min(r.envs for r in rows), max_envs)
        style = "--" if agent == HUMAN_AGENT else "-"
        axes.plot(hours, [r.point for r in rows], style, marker="o", markersize=3, color=color, label=label)
        axes.fill_between(hours, [r.low for r in rows], [r.high for r in rows], color=color, alpha=0.12)
    axes.set_xscale("log")
    ticks = [0.5, 2, 8, 16, 32, 64]
    axes.set_xticks(ticks, [format_duration(t * 3600) for t in ticks])
    axes.set_xlabel("total time budget per environment (k x per-attempt budget)")
    axes.set_ylabel("average normalized score (0 = start, 1 = reference)")
    axes.set_title(f"score@k ({report.settings.estimator}), 95% bootstrap intervals")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(figure)


def best_allocation_rows(report: Report, total_s: float) -> dict[tuple[str, str], list[ScoreRow]]:
    """Per agent and source: the per-environment rows of its best allocation (on average) at `total_s`."""
    best = {
        (r.agent, r.source): r
        for r in report.rows
        if r.environment == ALL and r.best_allocation and r.total_s == total_s
    }
    out: dict[tuple[str, str], list[ScoreRow]] = defaultdict(list)
    for row in report.rows:
        chosen = best.get((row.agent, row.source))
        if (
            row.environment != ALL
            and chosen is not None
            and (row.budget_s, row.k, row.total_s, row.truncated)
            == (chosen.budget_s, chosen.k, chosen.total_s, chosen.truncated)
        ):
            out[(row.agent, row.source)].append(row)
    return dict(out)


def per_environment(report: Report, total_s: float, info: EnvironmentInfo | None = None) -> bytes | None:
    """Per-environment scores at one total budget: each agent's best allocation, and the humans."""
    info = info or default_info()
    groups = best_allocation_rows(report, total_s)
    if not groups:
        return None
    envs = sorted({row.environment for rows in groups.values() for row in rows})
    figure, axes = plt.subplots(figsize=(max(8.0, 1.6 * len(envs)), 5))
    width = 0.8 / len(groups)
    colors = iter(_palette())
    for g, ((agent, source), rows) in enumerate(sorted(groups.items())):
        by_env = {row.environment: row for row in rows}
        xs = [i + g * width - 0.4 + width / 2 for i, env in enumerate(envs) if env in by_env]
        present = [by_env[env] for env in envs if env in by_env]
        points = [r.point for r in present]
        errors = [[r.point - r.low for r in present], [r.high - r.point for r in present]]
        color = HUMAN_COLOR if agent == HUMAN_AGENT else next(colors)
        axes.bar(xs, points, width, yerr=errors, color=color, alpha=0.8, capsize=2, label=f"{agent} ({source})")
    axes.set_xticks(range(len(envs)), [info.title(env) for env in envs], rotation=20, ha="right", fontsize=8)
    axes.set_ylabel("normalized score")
    axes.set_title(f"Per environment at {format_duration(total_s)} total budget (best allocation on average)")
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _png(figure)


def score_over_time(report: Report, info: EnvironmentInfo | None = None) -> bytes | None:
    """Each logged attempt's score (final rule, normalized) by working time, one panel per environment."""
    info = info or default_info()
    unique = {r.attempt_id: r for r in report.data.runs + report.data.humans}  # humans may be in both
    logged = [r for r in unique.values() if r.curve]
    if not logged:
        return None
    envs = sorted({r.environment for r in logged})
    figure, axes_list = plt.subplots(len(envs), 1, figsize=(8, 3 * len(envs)), squeeze=False)
    agents = sorted({r.agent for r in logged})
    palette = plt.get_cmap("tab10").colors  # type: ignore[attr-defined]
    colors = {agent: palette[i % len(palette)] for i, agent in enumerate(a for a in agents if a != HUMAN_AGENT)}
    colors[HUMAN_AGENT] = HUMAN_COLOR
    for axes, env in zip(axes_list[:, 0], envs, strict=True):
        seen: set[str] = set()
        for run in (r for r in logged if r.environment == env):
            assert run.curve is not None
            xs = [0.0] + [p.working_s / 3600 for p in run.curve] + [run.budget_s / 3600]
            ys = [0.0] + [p.normalized for p in run.curve] + [run.curve[-1].normalized]
            label = run.agent if run.agent not in seen else None
            seen.add(run.agent)
            axes.step(xs, ys, where="post", color=colors[run.agent], alpha=0.7, label=label)
        axes.set_title(info.title(env), fontsize=9)
        axes.set_xlabel("working time (h)")
        axes.set_ylabel("normalized score")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=7)
    figure.tight_layout()
    return _png(figure)
