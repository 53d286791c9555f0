"""The problem generator: deterministic, splits disjoint by task, the hidden split's operations
unseen in the validation split, names that say nothing, and Rust solutions that pass their own tests."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rebench.kit.buildutil import load_file

ENV = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path) -> Any:
    return load_file(name, path, reuse=False)


generator = _load("rust_problem_generator", ENV / "generator.py")
FIELDS = {"name", "description", "public_tests", "private_tests", "generated_tests", "solution"}


def test_same_arguments_same_problems_and_other_seeds_differ() -> None:
    first = generator.generate("valid", 30, seed=3)
    assert first == generator.generate("valid", 30, seed=3)
    other = generator.generate("valid", 30, seed=4)
    assert [p["description"] for p in first] != [p["description"] for p in other]


def test_problems_have_codecontests_shape() -> None:
    for problem in generator.generate("test", 50, seed=0):
        assert set(problem) >= FIELDS
        assert 1 <= len(problem["public_tests"]["input"]) <= 3
        for tests in ("public_tests", "private_tests", "generated_tests"):
            assert len(problem[tests]["input"]) == len(problem[tests]["output"]) > 0
        assert "fn main()" in problem["solution"]
    names = [p["name"] for p in generator.generate("test", 50, seed=0)]
    assert len(set(names)) == len(names)


def test_train_shares_no_task_or_description_with_valid_and_test() -> None:
    train = generator.generate("train", 4000, seed=0)
    held = {split: generator.generate(split, 300, seed=s) for split in ("valid", "test") for s in (0, 1)}
    train_tasks = {generator.task_key(p) for p in train}
    train_texts = {p["description"] for p in train}
    valid_tasks = set()
    for split, problems in held.items():
        tasks = {generator.task_key(p) for p in problems}
        assert not tasks & train_tasks, split
        assert not {p["description"] for p in problems} & train_texts, split
        if split == "valid":
            valid_tasks |= tasks
    test_tasks = {generator.task_key(p) for p in held["test"]}
    assert not valid_tasks & test_tasks
    # Held-out problems use operations the model was trained on (with other constants/wordings).
    assert {k[:2] for k in test_tasks} <= {k[:2] for k in train_tasks}
    assert {k[:2] for k in valid_tasks} <= {k[:2] for k in train_tasks}


def test_hidden_problems_use_only_operations_the_validation_split_never_shows() -> None:
    """Issue 25, item 10: a scaffold that learns the visible problems' templates (or operations)
    has nothing to match on the hidden split; the model trains on every operation. Each family
    appears on both sides, so the validation split still shows every input format."""
    valid = generator.generate("valid", 400, seed=14)
    test = generator.generate("test", 400, seed=15)
    valid_ops = {generator.task_key(p)[:2] for p in valid}
    test_ops = {generator.task_key(p)[:2] for p in test}
    everything = {(op.family, op.name) for op in generator._OPS}
    assert valid_ops == set(generator.VISIBLE_OPS) and test_ops <= everything - valid_ops
    assert len(test_ops) >= len(everything - valid_ops) - 2  # an operation with few tasks may miss the buckets
    for problems in (valid, test):  # each problem its own task: no statement twice, none drawn more often
        assert len({p["description"] for p in problems}) == len(problems)
    assert {op[0] for op in valid_ops} == {op[0] for op in test_ops} == {op.family for op in generator._OPS}
    assert {generator.task_key(p)[:2] for p in generator.generate("train", 3000, seed=0)} == everything
    hidden_sentences = {p["description"].split("\n")[0] for p in test}
    for problem in valid:  # no statement sentence of a visible problem recurs in a hidden one
        family, name, k, b, c, wording, _ = generator.task_key(problem)
        op = next(op for op in generator._OPS if (op.family, op.name) == (family, name))
        sentence = op.wordings[wording].format(k=k, b=b, c=c)
        assert not any(sentence in line for line in hidden_sentences), sentence


def test_names_are_random_ids_that_say_nothing_about_the_problem() -> None:
    problems = generator.generate("valid", 200, seed=14) + generator.generate("test", 200, seed=15)
    for problem in problems:  # not the split, the index, the family or the operation
        assert re.fullmatch(r"p[0-9a-f]{12}", problem["name"]), problem["name"]
    assert len({p["name"] for p in problems}) == len(problems)


def test_unknown_split_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"'dev'.*train, valid, test"):
        generator.generate("dev", 1, seed=0)


def test_more_problems_than_a_held_out_split_has_tasks_is_refused() -> None:
    with pytest.raises(ValueError, match=r"the test split has fewer than 5000 distinct problems"):
        generator.generate("test", 5000, seed=0)


def _passes(problem: dict[str, Any], work: Path) -> list[str]:
    source = work / f"{problem['name']}.rs"
    source.write_text(problem["solution"])
    binary = work / problem["name"]
    built = subprocess.run(["rustc", "--edition", "2018", "-o", str(binary), str(source)],
                           capture_output=True, text=True)
    if built.returncode:
        return [f"{problem['name']}: does not compile: {built.stderr[:300]}"]
    failures = []
    for tests in ("public_tests", "private_tests", "generated_tests"):
        for given, expected in zip(problem[tests]["input"], problem[tests]["output"], strict=True):
            got = subprocess.run([str(binary)], input=given, capture_output=True, text=True, timeout=10).stdout
            if got != expected:
                failures.append(f"{problem['name']}: input {given!r}: expected {expected!r}, got {got!r}")
    return failures


@pytest.mark.slow
def test_every_operation_s_solution_passes_its_tests_under_rustc(tmp_path: Path) -> None:
    """One problem per operation (all families), compiled with rustc --edition 2018 and run on every test."""
    per_op: dict[tuple[str, str], dict[str, Any]] = {}
    for split, n in (("train", 600), ("valid", 200), ("test", 200)):  # the test split holds ~600 distinct tasks
        for problem in generator.generate(split, n, seed=7):
            per_op.setdefault(generator.task_key(problem)[:2], problem)
    assert len(per_op) == len(generator._OPS)
    with ThreadPoolExecutor(2) as pool:
        failures = [f for found in pool.map(lambda p: _passes(p, tmp_path), per_op.values()) for f in found]
    assert not failures, "\n".join(failures[:5])
