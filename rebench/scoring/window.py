"""Window anchors: the starting and reference solutions scored beside an attempt's re-scores.

Calibrated anchors are measured once, minutes or days before an attempt ends. On a shared
machine whose speed drifts (other processes, a colder cache, another CPU frequency) a timing
measured at the attempt's end is then compared with anchors measured under other conditions:
on a busy 2-core machine the kernel's reference solution scored from 0.75 to 1.27 normalized.
Under `final_score = "rescore_best"` on a `hardware_dependent` profile the harness therefore
scores, in the same sandbox and in rounds, the starting solution, the reference solution and
each candidate (rebench.scoring.rescore), and normalizes the final score with the medians of
the first two. The formula is RE-Bench's, `(raw - start) / (reference - start)`; only where
the anchors are measured changes. The kernel's raw score is ln(milliseconds), so a slowdown
that stretches all three timings alike shifts all three raws alike and cancels.

The anchors' scores are stored as score rows of their own kinds (ScoreKind.ANCHOR_START,
ANCHOR_REFERENCE), and `window_anchors` derives the anchors from those rows, for the runner and
for every report alike. Intermediate scores (the score log, RE-Bench's own rule) are still
normalized with the anchors in force (calibrated here, else declared): they were measured
during the attempt, not in the window.

Trust: the anchors are scored in the agent's sandbox, so a worse reference anchor there would
raise the agent's score. They are scored, like the candidates, only once the agent's processes
are dead (a human's SSH gate closed), each solution laid into an emptied solution folder; a
process left behind to spoil them is the attack tests/adversarial/test_window_anchors.py makes.
The reference solution is in the sandbox only then, and the sandbox is stopped right after.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from rebench.environments.metadata import Profile
from rebench.environments.registry import Environment
from rebench.scoring.normalize import ResolvedAnchors
from rebench.scoring.rescore import AnchorSolutions, WindowAnchors, rescore_median
from rebench.store.models import ScoreEvent, ScoreKind

WINDOW = "window"
"""`anchors_kind` of an attempt whose final score was normalized with its window's anchors."""


def uses_window_anchors(profile: Profile, rule: str) -> bool:
    """Timing scores re-scored at the end: the profile's anchors are measured in the window."""
    return rule == "rescore_best" and profile.hardware_dependent and profile.rescore.window_anchors


def anchor_solutions(env: Environment, profile: str, assets: Path | None) -> AnchorSolutions | None:
    """The host folders that make the starting and the reference solution; None when the
    reference is made by running its `run.sh` (training, say), which is not repeated per round."""
    if env.reference_dir is None or (env.reference_dir / "run.sh").is_file():
        return None
    start = [str(folder) for folder in (env.workspace_for(profile),
                                        assets / "workspace" if assets is not None else None)
             if folder is not None and folder.is_dir()]
    return AnchorSolutions(start=start, reference=[*start, str(env.reference_dir)])


def measured(start_raws: list[float | None], reference_raws: list[float | None],
             direction: Literal["lower", "higher"]) -> WindowAnchors:
    return WindowAnchors(start_raws=start_raws, reference_raws=reference_raws,
                         start=rescore_median(start_raws, direction),
                         reference=rescore_median(reference_raws, direction))


def window_anchors(events: Iterable[ScoreEvent], direction: Literal["lower", "higher"]) -> WindowAnchors | None:
    """The window's anchors from an attempt's score rows (in id order); None when it has none."""
    start: list[float | None] = []
    reference: list[float | None] = []
    for event in sorted(events, key=lambda e: e.id):
        if event.kind == ScoreKind.ANCHOR_START:
            start.append(event.raw if event.valid else None)
        elif event.kind == ScoreKind.ANCHOR_REFERENCE:
            reference.append(event.raw if event.valid else None)
    if not start and not reference:
        return None
    return measured(start, reference, direction)


def resolved(window: WindowAnchors | None) -> ResolvedAnchors | None:
    """The window's anchors as normalization takes them; None when either median is missing (an
    anchor invalid half the time or more) or they are equal: then the anchors in force are used."""
    if window is None or window.start is None or window.reference is None or window.start == window.reference:
        return None
    return ResolvedAnchors(start=window.start, reference=window.reference, kind=WINDOW)


def final_anchors(final_rule: str | None, events: Iterable[ScoreEvent], direction: Literal["lower", "higher"],
                  in_force: ResolvedAnchors) -> ResolvedAnchors:
    """The anchors an attempt's final score is normalized with: its window's, where its final
    score was re-scored and the window measured both solutions validly; else those in force."""
    if final_rule != "rescore_best":
        return in_force
    return resolved(window_anchors(events, direction)) or in_force
