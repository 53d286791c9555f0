"""Report plots with matplotlib's Agg backend, returned as PNG bytes (inlined in HTML, written as files).

Readability rules: one colour per agent, the same in every plot; the y-axis covers the bulk
of the values, and a value above it (one outlier run can reach 8) is drawn as a triangle on
the top edge with its number, so it cannot squash everything else.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterable, Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from rebench.budget import format_duration
from rebench.literal import literal
from rebench.report.data import HUMAN_AGENT
from rebench.report.figure_text import literal_figure
from rebench.report.headline import beyond_data
from rebench.report.known_environments import EnvironmentInfo, default_info
from rebench.report.rows import ALL, PLAUSIBLE_MAX, Report, ScoreRow

matplotlib.rcParams["text.parse_math"] = False  # names from the store are text, never mathtext (figure_text)

HUMAN_COLOR = "black"
Color = tuple[float, ...] | str


def _colors(agents: Iterable[str]) -> dict[str, Color]:
    """One distinct colour per agent (tab10, then tab20's light shades); humans are black."""
    tab10 = list(plt.get_cmap("tab10").colors)  # type: ignore[attr-defined]
    light = list(plt.get_cmap("tab20").colors[1::2])  # type: ignore[attr-defined]
    base = tab10[:7] + tab10[8:] + light[:7] + light[8:]  # no greys: they read as the humans' black
    others = sorted({a for a in agents if a != HUMAN_AGENT})
    colors: dict[str, Color] = {agent: base[i % len(base)] for i, agent in enumerate(others)}
    colors[HUMAN_AGENT] = HUMAN_COLOR
    return colors


def _report_colors(report: Report) -> dict[str, Color]:
    return _colors(r.agent for r in report.data.runs + report.data.humans)


def robust_top(values: Sequence[float]) -> float:
    """The y-axis top: the largest value unless it lies far above the bulk (above 1.5 x the 90th
    percentile and above 2, which the paper never saw after review), plus a margin."""
    if not values:
        return 1.0
    array = np.asarray(values, dtype=np.float64)
    cap = max(PLAUSIBLE_MAX, 1.5 * float(np.percentile(array, 90)))
    return min(float(array.max()), cap) * 1.1 + 0.02


def _mark_off_scale(axes: Axes, xs: Sequence[float], ys: Sequence[float], top: float, color: Color) -> None:
    """Values above the axis: a triangle on the top edge and the value next to it."""
    for x, y in zip(xs, ys, strict=True):
        if y > top:
            axes.plot([x], [top], marker="^", color=color, markersize=7, clip_on=False, zorder=5)
            axes.annotate(f"{y:.2f}", (x, top), xytext=(4, -10), textcoords="offset points", fontsize=7, color=color)


BEYOND_NOTE = "x and †n=N: k above the N runs behind the estimate (only the best of them; --strict leaves it out)"


def _mark_beyond(axes: Axes, xs: Sequence[float], ys: Sequence[float], rows: Sequence[ScoreRow], top: float,
                 color: Color) -> bool:
    """Estimates whose k is above their runs: a cross on the point, and the run count written where it
    changes along the line. Whether there was any (the title then explains the mark)."""
    shown = None
    for x, y, row in zip(xs, ys, rows, strict=True):
        if not beyond_data(row):
            shown = None
            continue
        axes.plot([x], [min(y, top)], marker="x", color=color, markersize=7, zorder=6)
        if row.min_n != shown:
            axes.annotate(f"†n={row.min_n}", (x, min(y, top)), xytext=(3, -11), textcoords="offset points",
                          fontsize=7, color=color)
        shown = row.min_n
    return any(beyond_data(row) for row in rows)


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    literal_figure(figure)
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def _budget_axes(axes: Axes, report: Report, title: str, top: float) -> None:
    axes.set_xscale("log")
    ticks = [0.5, 2, 8, 16, 32, 64]
    axes.set_xticks(ticks, [format_duration(t * 3600) for t in ticks])
    axes.set_xlabel("total time budget per environment (k x per-attempt budget)")
    axes.set_ylabel("average normalized score (0 = start, 1 = reference)")
    axes.set_ylim(0, top)
    axes.set_title(title, fontsize=10)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def best_curves(report: Report) -> dict[tuple[str, str], list[ScoreRow]]:
    """Per agent and source: its best allocation at each total of the curves, by total."""
    out: dict[tuple[str, str], list[ScoreRow]] = defaultdict(list)
    for row in sorted(report.curves, key=lambda r: r.total_s):
        if row.best_allocation:
            out[(row.agent, row.source)].append(row)
    return dict(out)


def score_vs_budget(report: Report) -> bytes | None:
    figure = score_vs_budget_figure(report)
    return None if figure is None else _png(figure)


def score_vs_budget_figure(report: Report) -> Figure | None:
    """One line per agent: the average score of its best allocation at each total budget.

    Points over fewer environments than the most any agent covers are hollow, and the count
    is written where it changes along the line; points whose k is above their runs are crossed.
    """
    lines = best_curves(report)
    if not lines:
        return None
    colors = _report_colors(report)
    max_envs = max(row.envs for rows in lines.values() for row in rows)
    top = robust_top([row.point for rows in lines.values() for row in rows])
    sources = {source for _, source in lines}
    figure, axes = plt.subplots(figsize=(9, 5.5))
    beyond = False
    for (agent, source), rows in sorted(lines.items(), key=lambda item: (item[0][0] != HUMAN_AGENT, item[0])):
        color = colors[agent]
        hours = [r.total_s / 3600 for r in rows]
        points = [r.point for r in rows]
        label = agent if len(sources) == 1 else f"{agent} ({source})"
        style = "--" if agent == HUMAN_AGENT else "-"
        axes.plot(hours, points, style, color=color, label=label, linewidth=1.6)
        axes.fill_between(hours, [r.low for r in rows], [min(r.high, top) for r in rows], color=color, alpha=0.08)
        full = [(h, p) for h, p, r in zip(hours, points, rows, strict=True) if r.envs >= max_envs]
        part = [(h, p) for h, p, r in zip(hours, points, rows, strict=True) if r.envs < max_envs]
        if full:
            axes.plot(*zip(*full, strict=True), "o", color=color, markersize=4)
        if part:
            axes.plot(*zip(*part, strict=True), "o", markerfacecolor="white", color=color, markersize=5)
        shown = None
        for h, p, r in zip(hours, points, rows, strict=True):
            if r.envs != shown and r.envs < max_envs:
                axes.annotate(
                    f"{r.envs} envs",
                    (h, min(p, top)),
                    xytext=(3, 4),
                    textcoords="offset points",
                    fontsize=7,
                    color=color,
                )
            shown = r.envs
        beyond = _mark_beyond(axes, hours, points, rows, top, color) or beyond
        _mark_off_scale(axes, hours, points, top, color)
    _budget_axes(
        axes,
        report,
        f"Best allocation per agent, score@k ({report.settings.estimator}), 95% bootstrap bands\n"
        f"hollow points: fewer than {max_envs} environments (count written where it changes)"
        + (f"\n{BEYOND_NOTE}" if beyond else ""),
        top,
    )
    return figure


def _group_label(agent: str, source: str, budget_s: float, envs: int, max_envs: int) -> str:
    label = f"{agent} ({format_duration(budget_s)} attempts, {source})"
    return label if envs >= max_envs else f"{label}, {envs} envs"


def score_by_attempt_length(report: Report) -> bytes | None:
    """Every agent and per-attempt length as its own line (k = 1, 2, 4, ...); line style by length."""
    curves: dict[tuple[str, str, float], list[ScoreRow]] = defaultdict(list)
    for row in report.curves:
        curves[(row.agent, row.source, row.budget_s)].append(row)
    if not curves:
        return None
    colors = _report_colors(report)
    lengths = sorted({budget for _, _, budget in curves})
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D"]
    max_envs = max(row.envs for row in report.curves)
    top = robust_top([row.point for row in report.curves])
    figure, axes = plt.subplots(figsize=(9, 5.5))
    beyond = False
    for (agent, source, budget_s), rows in sorted(curves.items()):
        rows.sort(key=lambda r: r.total_s)
        color = colors[agent]
        i = lengths.index(budget_s) % len(styles)
        hours = [r.total_s / 3600 for r in rows]
        points = [r.point for r in rows]
        label = _group_label(agent, source, budget_s, min(r.envs for r in rows), max_envs)
        axes.plot(hours, points, styles[i], marker=markers[i], markersize=3, color=color, label=label)
        beyond = _mark_beyond(axes, hours, points, rows, top, color) or beyond
        _mark_off_scale(axes, hours, points, top, color)
    title = f"score@k by agent and per-attempt length ({report.settings.estimator})"
    _budget_axes(axes, report, title + (f"\n{BEYOND_NOTE}" if beyond else ""), top)
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


def error_bars(rows: Sequence[ScoreRow]) -> list[list[float]]:
    """Distances from each point down to `low` and up to `high`, never negative.

    When every run of an environment has the same score, the bootstrap bounds and the point
    differ by a rounding step either way; matplotlib rejects a negative length.
    """
    return [[max(0.0, r.point - r.low) for r in rows], [max(0.0, r.high - r.point) for r in rows]]


def per_environment(report: Report, total_s: float, info: EnvironmentInfo | None = None) -> bytes | None:
    figure = per_environment_figure(report, total_s, info)
    return None if figure is None else _png(figure)


def per_environment_figure(report: Report, total_s: float, info: EnvironmentInfo | None = None) -> Figure | None:
    """Per-environment scores at one total budget: each agent's best allocation, and the humans.
    Each bar says how many runs it rests on (n=N, †n=N and hatched where k is above them)."""
    info = info or default_info()
    groups = best_allocation_rows(report, total_s)
    if not groups:
        return None
    colors = _report_colors(report)
    envs = sorted({row.environment for rows in groups.values() for row in rows})
    top = robust_top([row.point for rows in groups.values() for row in rows])
    sources = {source for _, source in groups}
    figure, axes = plt.subplots(figsize=(max(8.0, 1.6 * len(envs)), 5))
    width = 0.8 / len(groups)
    ordered = sorted(groups.items(), key=lambda item: (item[0][0] != HUMAN_AGENT, item[0]))
    beyond = False
    for g, ((agent, source), rows) in enumerate(ordered):
        by_env = {row.environment: row for row in rows}
        xs = [i + g * width - 0.4 + width / 2 for i, env in enumerate(envs) if env in by_env]
        present = [by_env[env] for env in envs if env in by_env]
        points = [r.point for r in present]
        label = agent if len(sources) == 1 else f"{agent} ({source})"
        color = colors[agent]
        bars = axes.bar(
            xs,
            points,
            width,
            yerr=error_bars(present),
            color=color,
            alpha=0.85,
            capsize=2,
            label=label,
            error_kw={"elinewidth": 0.8},
        )
        for bar, x, row in zip(bars, xs, present, strict=True):
            if beyond_data(row):
                bar.set_hatch("//")
                beyond = True
            axes.annotate(f"{'†' if beyond_data(row) else ''}n={row.min_n}", (x, 0), xytext=(0, 2),
                          textcoords="offset points", fontsize=6, ha="center", rotation=90, va="bottom")
        _mark_off_scale(axes, xs, points, top, color)
    axes.set_ylim(0, top)
    axes.set_xticks(range(len(envs)), [literal(info.title(env)) for env in envs], rotation=20, ha="right", fontsize=8)
    axes.set_ylabel("normalized score")
    title = f"Per environment at {format_duration(total_s)} total budget (each agent's best allocation)"
    if not any(agent == HUMAN_AGENT for agent, _ in groups):
        title += f"\nno human data at {format_duration(total_s)} (human attempts are 8 h; cut needs a score log)"
    if beyond:
        title += "\nhatched, †n=N: k above the N runs behind the bar (only the best of them; --strict leaves it out)"
    axes.set_title(title)
    axes.grid(True, axis="y", alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return figure


def score_over_time(report: Report, info: EnvironmentInfo | None = None) -> bytes | None:
    """Each logged attempt's score (final rule, normalized) by working time, one panel per environment."""
    info = info or default_info()
    unique = {r.attempt_id: r for r in report.data.runs + report.data.humans}  # humans may be in both
    logged = [r for r in unique.values() if r.curve]
    if not logged:
        return None
    envs = sorted({r.environment for r in logged})
    figure, axes_list = plt.subplots(len(envs), 1, figsize=(8, 3 * len(envs)), squeeze=False)
    colors = _report_colors(report)
    for axes, env in zip(axes_list[:, 0], envs, strict=True):
        seen: set[str] = set()
        runs = [r for r in logged if r.environment == env]
        top = robust_top([p.normalized for r in runs for p in r.curve or ()])
        for run in runs:
            assert run.curve is not None
            xs = [0.0] + [p.working_s / 3600 for p in run.curve] + [run.budget_s / 3600]
            ys = [0.0] + [p.normalized for p in run.curve] + [run.curve[-1].normalized]
            label = run.agent if run.agent not in seen else None
            seen.add(run.agent)
            axes.step(xs, ys, where="post", color=colors[run.agent], alpha=0.7, label=label)
            _mark_off_scale(axes, xs[-1:], ys[-1:], top, colors[run.agent])
        axes.set_ylim(0, top)
        axes.set_title(info.title(env), fontsize=9)
        axes.set_xlabel("working time (h)")
        axes.set_ylabel("normalized score")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=7)
    literal_figure(figure).tight_layout()
    return _png(figure)
