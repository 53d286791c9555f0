"""Solve rates of rust_codecontests_inference's local model on generated validation problems.

    python benchmarks/rust_model.py --model DIR [--problems 60] [--n 8] [--temperature 1.0]
    python benchmarks/rust_model.py --train ci --model DIR    # train first (train_model.PRESETS)

For each problem, `n` samples (one seeded request, as the gateway makes them) are compiled with
`rustc --edition 2018` and run on the tests. Printed: the single-sample solve rate (the mean over
all samples: what the starting solution's one sample gets), best-of-n with public-test filtering
(the first sample that passes the public tests; the reference solution's lever) and pass@n (any
sample solves it: the ceiling of filtering).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

from rebench.kit.buildutil import load_file

ENV = Path(__file__).resolve().parents[1] / "environments" / "rust_codecontests_inference"
_CODE = re.compile(r"```(?:rust)?\n(.*?)(?:```|$)", re.DOTALL)


def env_module(name: str) -> ModuleType:
    return load_file(f"_rust_codecontests_{name}", ENV / f"{name}.py")


def extract_code(answer: str) -> str:
    found = _CODE.search(answer)
    return found.group(1) if found else answer


class Judge:
    """Compiles each distinct program once and runs it on tests (2 s per test)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.binaries: dict[str, Path | None] = {}

    def binary(self, source: str) -> Path | None:
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        if digest not in self.binaries:
            path = self.work / f"p{digest}"
            (self.work / f"p{digest}.rs").write_text(source)
            built = subprocess.run(["rustc", "--edition", "2018", "-o", str(path), str(path) + ".rs"],
                                   capture_output=True, timeout=60)
            self.binaries[digest] = path if built.returncode == 0 else None
        return self.binaries[digest]

    def passes(self, source: str, tests: dict[str, list[str]]) -> bool:
        path = self.binary(source)
        if path is None:
            return False
        for given, expected in zip(tests["input"], tests["output"], strict=True):
            try:
                run = subprocess.run([str(path)], input=given, capture_output=True, text=True, timeout=2)
            except subprocess.TimeoutExpired:
                return False
            if run.returncode != 0 or run.stdout.strip() != expected.strip():
                return False
        return True


def all_tests(problem: dict[str, Any]) -> dict[str, list[str]]:
    keys = ("public_tests", "private_tests", "generated_tests")
    return {field: [x for k in keys for x in problem[k][field]] for field in ("input", "output")}


def evaluate(model_dir: Path, problems: int, n: int, temperature: float, seed: int = 0) -> dict[str, Any]:
    model = env_module("model").load(model_dir)
    valid = env_module("generator").generate("valid", problems, seed)
    started = time.monotonic()
    answers = []
    for i, p in enumerate(valid):
        prompt = model.chat_prompt([{"role": "user", "content": f"<problem>\n{p['description']}\n</problem>"}])
        answers.append(model.generate(prompt, n=n, temperature=temperature, max_tokens=400, seed=seed * 100_003 + i))
    generate_s = time.monotonic() - started
    with tempfile.TemporaryDirectory() as tmp:
        judge = Judge(Path(tmp))

        def one(item: tuple[dict[str, Any], list[Any]]) -> tuple[float, bool, bool]:
            problem, completions = item
            codes = [extract_code(c.text) for c in completions]
            solved = [judge.passes(code, all_tests(problem)) for code in codes]
            chosen = next((code for code in codes if judge.passes(code, problem["public_tests"])), codes[0])
            return sum(solved) / len(solved), judge.passes(chosen, all_tests(problem)), any(solved)

        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(one, zip(valid, answers, strict=True)))
    return {
        "problems": problems, "n": n, "temperature": temperature,
        "single_sample": round(sum(r[0] for r in results) / problems, 4),
        f"best_of_{n}_public_filter": round(sum(r[1] for r in results) / problems, 4),
        f"pass_at_{n}": round(sum(r[2] for r in results) / problems, 4),
        "generate_seconds": round(generate_s, 1),
        "distinct_programs_compiled": len(judge.binaries),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="the model folder (train_model's out_dir)")
    parser.add_argument("--train", choices=("tiny", "ci"), help="train with this preset into --model first")
    parser.add_argument("--problems", type=int, default=60)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args()
    if args.train:
        train_model = env_module("train_model")
        print(json.dumps(train_model.train(args.model, seed=0, **train_model.PRESETS[args.train])), flush=True)
    print(json.dumps(evaluate(args.model, args.problems, args.n, args.temperature)))


if __name__ == "__main__":
    main()
