"""Each own attempt's story for `rebench report --out`: its score over time, and where it is read.

One small plot per attempt (so a campaign of 100 attempts is 100 readable plots, folded in
report.html, rather than one crowded panel): every intermediate score the agent asked for
(normalized; invalid ones as crosses on the floor), the standing under the final-score rule,
the re-scores of a `rescore_best` final at the end, and the pauses shaded. The x-axis is time
since the attempt's start, so a pause is a shaded stretch; working time is that time less the
shaded stretches. aide attempts carry their solution tree. Each attempt links to its sample in
Inspect's viewer as `rebench view` serves it (rebench.report.log_names names the log files).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from urllib.parse import quote

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rebench.literal import html_literal, markdown_literal
from rebench.report.data import HUMAN_AGENT, Normalizer, RunRecord, agent_label
from rebench.report.known_environments import EnvironmentInfo, default_info
from rebench.report.log_names import log_name
from rebench.report.tree import SolutionTree, load_tree, tree_html
from rebench.scoring.normalize import ResolvedAnchors, normalize
from rebench.store import Attempt, ScoreEvent, Store
from rebench.store.models import Campaign, Event, Pause

VIEWER = "http://127.0.0.1:7575"
"""`rebench view`'s default address; its viewer routes by the URL's fragment (#/logs/...)."""


@dataclass(frozen=True)
class StoryPause:
    start_s: float
    """Seconds since the attempt's start (wall time), as the pauses table stores them."""
    end_s: float
    reason: str


@dataclass(frozen=True)
class AttemptStory:
    run: RunRecord
    scores: tuple[tuple[float, float | None], ...]
    """(working seconds, normalized score or None when the score call was invalid)."""
    rescores: tuple[float, ...]
    """Normalized re-scores of the kept solution (final_score = rescore_best)."""
    end_working_s: float
    pauses: tuple[StoryPause, ...]
    log_file: str
    """The .eval file `rebench view` / `rebench export inspect` writes this attempt into."""
    tree: SolutionTree | None = None

    def wall(self, working_s: float) -> float:
        """Seconds since the start at which the attempt had worked `working_s` (pauses added back)."""
        paused = 0.0
        for pause in self.pauses:
            if pause.start_s - paused < working_s:
                paused += pause.end_s - pause.start_s
        return working_s + paused

    def viewer_url(self, base: str = VIEWER) -> str:
        return f"{base}/#/logs/{quote(self.log_file)}/samples/sample/{self.run.attempt_id}/1/"

    def view_command(self) -> str:
        campaign = f" --campaign {self.run.campaign_id}" if self.run.campaign_id is not None else ""
        return f"rebench view{campaign}"


def _log_file(session: Session, attempt: Attempt) -> str:
    """The name rebench.export.inspect_log gives the log holding this attempt (one per campaign,
    environment and agent label, stamped with the campaign's creation time)."""
    label = agent_label(attempt)
    if attempt.campaign_id is not None:
        created = session.scalar(select(Campaign.created_at).where(Campaign.id == attempt.campaign_id))
    else:
        created = min(a.created_at for a in session.scalars(select(Attempt).where(
            Attempt.campaign_id.is_(None), Attempt.environment == attempt.environment)) if agent_label(a) == label)
    return log_name(attempt.campaign_id, attempt.environment, label, created)


def _normalized(raw: float | None, anchors: ResolvedAnchors | None) -> float | None:
    return None if raw is None or anchors is None else normalize(raw, anchors.start, anchors.reference)


def load_stories(store: Store, runs: Sequence[RunRecord], info: EnvironmentInfo | None = None) -> list[AttemptStory]:
    """The stories of the own attempts among `runs` (imported runs have no log to tell), by id."""
    normalizer = Normalizer(store, info or default_info())
    own = sorted({r.attempt_id: r for r in runs if r.source == "own"}.values(), key=lambda r: r.attempt_id)
    stories = []
    with store.session() as session:
        for run in own:
            attempt = session.get_one(Attempt, run.attempt_id)
            spec = normalizer.spec(attempt.environment, attempt.profile)
            norm = partial(_normalized, anchors=spec[1] if spec is not None else None)

            events = list(session.scalars(select(ScoreEvent).where(ScoreEvent.attempt_id == run.attempt_id)
                                          .order_by(ScoreEvent.working_s, ScoreEvent.id)))
            scores = tuple((float(e.working_s), norm(e.raw) if e.valid else None)
                           for e in events if e.kind == "intermediate")
            rescores = tuple(v for e in events if e.kind == "rescore" and e.valid
                             for v in [norm(e.raw)] if v is not None)
            pauses = tuple(StoryPause(float(p.start_s), float(p.end_s), str(p.reason)) for p in session.scalars(
                select(Pause).where(Pause.attempt_id == run.attempt_id, Pause.end_s.is_not(None))
                .order_by(Pause.start_s)) if p.end_s is not None)
            has_tree = session.scalar(select(func.count()).select_from(Event).where(
                Event.attempt_id == run.attempt_id, Event.kind == "aide_node"))
            end = float(attempt.working_s) or max((s for s, _ in scores), default=0.0)
            stories.append(AttemptStory(run=run, scores=scores, rescores=rescores, end_working_s=end, pauses=pauses,
                                        log_file=_log_file(session, attempt),
                                        tree=load_tree(session, run.attempt_id) if has_tree else None))
    return stories


def story_png(story: AttemptStory) -> bytes:
    """The attempt's score over time: a small figure of its own (readable however many attempts)."""
    import io

    import matplotlib.pyplot as plt

    from rebench.report.figure_text import literal_figure

    run = story.run
    end_wall = story.wall(story.end_working_s)
    scale, unit = (3600.0, "h") if max(end_wall, run.budget_s) >= 7200 else (60.0, "min")
    figure, axes = plt.subplots(figsize=(8, 2.6))
    for i, pause in enumerate(story.pauses):
        axes.axvspan(pause.start_s / scale, pause.end_s / scale, color="0.85", zorder=0,
                     label="pause" if i == 0 else None)
    valid = [(story.wall(w) / scale, v) for w, v in story.scores if v is not None]
    invalid = [story.wall(w) / scale for w, v in story.scores if v is None]
    values = [v for _, v in valid] + list(story.rescores) + [run.score]
    top = max(1.05, max(values) * 1.1)
    if valid:
        axes.plot(*zip(*valid, strict=True), "o", color="tab:blue", markersize=3, alpha=0.6,
                  label="intermediate score")
    if invalid:
        axes.plot(invalid, [0.0] * len(invalid), "x", color="tab:red", markersize=4, label="invalid score")
    if run.curve:
        xs = [0.0] + [story.wall(p.working_s) / scale for p in run.curve] + [end_wall / scale]
        ys = [0.0] + [p.normalized for p in run.curve] + [run.curve[-1].normalized]
        axes.step(xs, ys, where="post", color="tab:blue", linewidth=1.2, label="standing (final rule)")
    if story.rescores:
        axes.plot([end_wall / scale] * len(story.rescores), list(story.rescores), "D", color="tab:orange",
                  markersize=4, alpha=0.7, label="final re-scores")
    axes.axhline(run.score, color="tab:green", linestyle=":", linewidth=1, label=f"final {run.score:.3f}")
    axes.set_xlim(0, max(end_wall, run.budget_s, 1.0) * 1.03 / scale)  # room for the re-scores at the end
    axes.set_ylim(0, top)
    axes.set_xlabel(f"time since start ({unit}); pauses shaded, working time excludes them", fontsize=8)
    axes.set_ylabel("normalized score", fontsize=8)
    axes.tick_params(labelsize=7)
    axes.grid(True, alpha=0.3)
    axes.set_title(f"attempt {run.attempt_id}: {run.agent} on {run.environment}", fontsize=9)
    axes.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.subplots_adjust(left=0.08, right=0.78, bottom=0.2, top=0.88)  # fixed margins: no tight-bbox pass
    buffer = io.BytesIO()
    literal_figure(figure).savefig(buffer, format="png", dpi=90)  # small, and cheap: a campaign may have hundreds
    plt.close(figure)
    return buffer.getvalue()


def story_file(story: AttemptStory) -> str:
    return f"attempts/attempt_{story.run.attempt_id}.png"


def _row(story: AttemptStory) -> str:
    run = story.run
    pauses = sum(p.end_s - p.start_s for p in story.pauses)
    cells = [str(run.attempt_id), run.environment, run.agent, f"{run.score:.3f}", str(len(story.scores)),
             f"{len(story.pauses)} ({pauses / 60:.0f} min)" if story.pauses else "-"]
    link = (f"<a href='{html_literal(story.viewer_url())}'>{html_literal(story.log_file)}</a> "
            f"(<code>{html_literal(story.view_command())}</code>)")
    return "<tr>" + "".join(f"<td>{html_literal(c)}</td>" for c in cells) + f"<td>{link}</td></tr>"


def stories_html(stories: Sequence[AttemptStory], images: dict[int, str]) -> str:
    """The attempts section: a table linking each attempt to its transcript, then each attempt's
    plot (and aide tree) folded, so a long campaign stays a page one can scroll."""
    if not stories:
        return ""
    parts = ["<h2>Attempts</h2>",
             "<p class='note'>Transcript links open the attempt in Inspect's viewer; start it first with the "
             "command beside the link (it serves on 127.0.0.1:7575 by default).</p>",
             "<table><tr><th>attempt</th><th>environment</th><th>agent</th><th>score</th><th>scores asked</th>"
             "<th>pauses</th><th>transcript</th></tr>"]
    parts += [_row(s) for s in stories]
    parts.append("</table>")
    for story in stories:
        run = story.run
        who = "expert" if run.agent == HUMAN_AGENT else "agent"
        parts.append(f"<details><summary>attempt {run.attempt_id}: {html_literal(run.agent)} ({who}) on "
                     f"{html_literal(run.environment)}, score {run.score:.3f}</summary>")
        parts.append(f"<img alt='attempt {run.attempt_id} score over time' src='{images[run.attempt_id]}'>")
        if story.tree is not None:
            parts.append(tree_html(story.tree))
        parts.append("</details>")
    return "\n".join(parts)


def stories_markdown(stories: Sequence[AttemptStory]) -> list[str]:
    if not stories:
        return []
    lines = ["## Attempts", "", "| attempt | environment | agent | score | plot | transcript |",
             "|---|---|---|---|---|---|"]
    for s in stories:
        lines.append(f"| {s.run.attempt_id} | {markdown_literal(s.run.environment)} | "
                     f"{markdown_literal(s.run.agent)} | "
                     f"{s.run.score:.3f} | [plot]({story_file(s)}) | [{s.log_file}]({s.viewer_url()}) "
                     f"(`{s.view_command()}`) |")
    return [*lines, ""]

