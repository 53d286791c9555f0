"""benchmarks/rust_model.py's judge: the solve-rate figures count a program as solved only when it
compiles with rustc and passes every test, and read the model's fenced answers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_rust_model", ROOT / "benchmarks" / "rust_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_rust_model"] = module
    spec.loader.exec_module(module)
    return module


bench = _bench()


def test_extract_code_reads_fenced_cut_and_plain_answers() -> None:
    assert bench.extract_code("```rust\nfn main() {}\n```") == "fn main() {}\n"
    assert bench.extract_code("```rust\nfn main() {") == "fn main() {"  # cut at max_tokens
    assert bench.extract_code("fn main() {}") == "fn main() {}"


@pytest.mark.slow
def test_judge_counts_only_programs_that_compile_and_pass_every_test(tmp_path: Path) -> None:
    problem = bench.env_module("generator").generate("valid", 1, seed=0)[0]
    judge = bench.Judge(tmp_path)
    tests = bench.all_tests(problem)
    assert judge.passes(problem["solution"], tests)
    wrong = problem["solution"].replace('println!("{}", ', 'println!("{}1", ', 1)
    assert wrong != problem["solution"]
    assert not judge.passes(wrong, tests)
    assert not judge.passes("fn main() { let x: i64 = ; }", tests)
    assert judge.passes(problem["solution"], tests)  # compiled once, reused
    assert len(judge.binaries) == 3
