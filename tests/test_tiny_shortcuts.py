"""Issue 25, item 11: the cheapest ways around each tiny task stay well below the reference.

Each shortcut (benchmarks/shortcut_solutions.py) is what an agent could write in minutes without
doing the task; it is applied as the agent in a fresh local sandbox laid out by the harness and
scored by the real scorer through `run_scoring` (benchmarks/tiny_shortcuts.py, which prints the
figures of the environments' READMEs, "Shortcuts on `tiny`"). Where `ci` is the `tiny` task with
fewer rows or prompts (optimize_llm_foundry, nanogpt_chat_rl: the same code, stages, clock and
judge), the test uses `ci`. "Well below": at most half of the start-to-reference gain.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from benchmarks.shortcut_solutions import SHORTCUTS
from benchmarks.tiny_shortcuts import score_reference, score_shortcut
from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.scoring.normalize import normalize

from .conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.torch]
WELL_BELOW = 0.5


def environment(name: str) -> Environment:
    return EnvironmentRegistry(REPO / "environments").get(name)


def scores(name: str, profile: str, shortcut: str, **changes: object) -> dict[str, float | None]:
    """{shortcut or variant: normalized score with the declared anchors, None when invalid}."""
    env = environment(name)
    chosen = dataclasses.replace(SHORTCUTS[name][shortcut], **changes)  # type: ignore[arg-type]
    anchors = env.profile(profile).anchors
    return {scored.name: None if scored.result.raw is None
            else normalize(scored.result.raw, anchors.start, anchors.reference, clip=False)
            for scored in asyncio.run(score_shortcut(env, profile, shortcut, chosen))}


def test_restricted_mlm_the_starting_design_made_bigger_and_trained_longer_stays_at_the_start() -> None:
    """The starting MLP sees one token at a time: at a masked position only the mask id, so whatever its
    size or training its best there is the targets' unigram frequencies. Scored: that limit, and the MLP
    twice as wide trained for 300 steps (the benchmark trains it for 2000)."""
    limit = scores("restricted_mlm", "tiny", "any per-token model's limit (unigram frequencies)")
    bigger = scores("restricted_mlm", "tiny", "the starting MLP, twice as wide, 4x the steps",
                    commands=("python bigger.py 300",))
    values = [*limit.values(), *bigger.values()]
    assert all(value is not None and value <= 0.1 for value in values), values


def test_restricted_mlm_neighbour_lookup_tables_trained_for_seconds_stay_below_the_reference() -> None:
    """Four vocabulary-by-vocabulary tables, one per neighbour, summed: on the kit's default corpus (logits a
    sum of per-neighbour terms) they scored 1.64; the tiny corpus's joint class term leaves them little."""
    [value] = scores("restricted_mlm", "tiny", "four neighbour lookup tables, 300 steps").values()
    assert value is not None and value <= WELL_BELOW, value


def test_restricted_mlm_neighbour_pair_tables_stay_below_the_reference() -> None:
    """The obvious upgrade: a table per neighbour pair (first * V + second) sees the joint term, but with
    V**2 rows it has few examples per row. Here only the pair of the two previous tokens, which the joint
    term is a function of, for 300 steps (a 67 MB table: the three pairs' 200 MB take most of the
    scorer's 60 s on a busy machine); the benchmark trains three pairs for 1000 steps."""
    [value] = scores("restricted_mlm", "tiny", "neighbour and neighbour-pair lookup tables, 1000 steps",
                     commands=("python pairs.py 300 -2:-1",)).values()
    assert value is not None and value <= WELL_BELOW, value


def test_small_scaling_law_the_best_run_under_the_cap_answered_without_extrapolating() -> None:
    """Only the capped sweep's best width (12: the README's measured sweep) is run, to keep it short;
    answered as it is and with its steps or width scaled to the target budget."""
    values = scores("small_scaling_law", "tiny", "the capped sweep's best run, as it is",
                    commands=("python capped_sweep.py 12",))
    assert len(values) == 3 and all(v is not None for v in values.values()), values
    assert max(v for v in values.values() if v is not None) <= WELL_BELOW, values


@pytest.mark.parametrize("shortcut", ["the start, cached by input buffer", "the start, precomputed for seeded inputs"])
def test_triton_cumsum_answers_not_computed_from_the_calls_input_are_invalid(shortcut: str) -> None:
    """The scorer writes every input into the same buffer, from os.urandom, and checks every answer."""
    assert list(scores("triton_cumsum", "tiny", shortcut).values()) == [None]


@pytest.mark.alone  # timings compared, and finetune.sh has a wall-clock limit
def test_optimize_llm_foundry_skipping_only_the_evaluation_stays_well_below_the_reference() -> None:
    """Timings depend on the machine: the shortcut is measured beside the reference in the same run, and
    the start-to-reference gap is the declared anchors' (normalized = 1 - ln(shortcut / reference) / gap)."""
    env = environment("optimize_llm_foundry")
    [scored] = asyncio.run(score_shortcut(env, "ci", "evaluation skipped",
                                          SHORTCUTS[env.name]["evaluation skipped, nothing else"]))
    reference = asyncio.run(score_reference(env, "ci"))
    assert scored.result.raw is not None and reference.raw is not None, (scored.result.message, reference.message)
    assert scored.result.message["norm_diff"] == 0, scored.result.message  # evaluating changes no weight
    anchors = env.profile("ci").anchors
    value = 1 - (scored.result.raw - reference.raw) / (anchors.start - anchors.reference)
    assert value <= WELL_BELOW, (value, scored.result.message, reference.message)


GREEDY_BAR = 0.8
"""Greedy decoding's own bar, above WELL_BELOW: since the training prompts and the corpus exclude the
final split (issue 31) greedy alone gets about half the reference's gain (0.56 on `ci`'s 48 prompts,
0.46 on `tiny`'s 128; README, Shortcuts on tiny), a finding that is not closed. This still fails if
a change lets greedy reach most of the reference's gain; 48 prompts give it about 0.14 of sd."""


@pytest.mark.parametrize("shortcut, bar", [("the untuned student, greedy", GREEDY_BAR),
                                           ("the untuned student, the reference's sampling (0.7, top-k 8)",
                                            WELL_BELOW)])
def test_nanogpt_chat_rl_sampling_settings_alone_stay_well_below_the_reference(shortcut: str, bar: float) -> None:
    """No finetuning: the starting student resubmitted with other sampling settings, judged through the
    gateway. The reference's sampling gets -0.21 on `ci`; greedy gets 0.56, under its own bar (GREEDY_BAR).
    Constant answers and echoing the prompt: tests/test_chat_env_model.py."""
    [value] = scores("nanogpt_chat_rl", "ci", shortcut).values()
    assert value is not None and value <= bar, value
