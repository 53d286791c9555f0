"""Build Scaffolding for Rust CodeContests: `python build.py --profile P --out DIR [--assets IN]`.

paper: the CodeContests problems from the operator's `code_contests` asset in IN (valid.jsonl,
       test.jsonl, the dataset's original splits), the splits named in `easy_splits` cut to
       RE-Bench's "easy" problems (code_contests.py); DIR/manifest.json records what was kept and
       the build stops when it differs from the pins (`easy_counts`, `easy_manifest_sha256`).
tiny, ci: problems from generator.py (seeded; the model's training problems share no task with
them, and the hidden problems no operation with the validation ones), and the model trained by
train_model.py.

DIR/workspace: data/valid.jsonl (public and hidden tests, no solutions), rust_eval.py (the
               scorer's harness), the starting solve_code_contests_rust.py (start_paper/ for
               paper, RE-Bench's; start_tiny/ for tiny and ci); evaluate.py comes from the
               environment's workspace/
DIR/protected: test.jsonl, the hidden problems every score call evaluates on (no solutions);
               final.jsonl (tiny, ci: `n_final` more hidden problems, the held-out final split
               scored once after the attempt, docs/heldout.md; paper has none)
DIR/model:     the local model's weights and vocabulary (tiny, ci), served by the harness's
               gateway; never copied into the sandbox
DIR/home:      profile_params.json (for `python score.py` run by hand)
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from rebench.kit import buildutil

HERE = Path(__file__).resolve().parent
KEPT = ("name", "description", "public_tests", "private_tests", "generated_tests",
        "difficulty", "source", "cf_rating", "time_limit", "memory_limit_bytes")
"""The fields a problem keeps in the task's files (never a solution)."""


def sibling(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"rust_env_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def write_jsonl(path: Path, problems: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for problem in problems:
            handle.write(json.dumps({key: problem[key] for key in KEPT if key in problem}) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise SystemExit(f"asset code_contests: {path} is missing; the folder must hold valid.jsonl and test.jsonl")
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


Problems = list[dict[str, Any]]


def paper_problems(folder: Path, params: dict[str, Any], out: Path) -> tuple[Problems, Problems]:
    """The operator's original splits, the `easy_splits` filtered, checked against the pins."""
    contests = sibling("code_contests")
    splits = {name: read_jsonl(folder / f"{name}.jsonl") for name in ("valid", "test")}
    filtered = [str(name) for name in params.get("easy_splits", [])]
    unknown = sorted(set(filtered) - set(splits))
    if unknown:
        raise SystemExit(f"easy_splits names {', '.join(unknown)}; allowed: valid, test")
    for name in filtered:
        splits[name] = contests.easy(splits[name])
    record = contests.manifest(splits, filtered)
    (out / "manifest.json").write_bytes(contests.manifest_bytes(record))
    problem = contests.check(record, pinned_sha256=str(params.get("easy_manifest_sha256", "unpinned")),
                             expected_counts={str(k): int(v) for k, v in params.get("easy_counts", {}).items()})
    if problem:
        raise SystemExit(problem)
    return splits["valid"], splits["test"]


def generated_problems(params: dict[str, Any]) -> tuple[Problems, Problems, Problems]:
    """tiny/ci: the validation split, the hidden split and the held-out final split (generator.py;
    the validation and hidden operations are disjoint).

    The final split is the same draw of hidden problems continued past `n_test`: the generator
    draws a split's problems one after another and never repeats a task, so the first `n_test`
    are the hidden split as before and the next `n_final` are other tasks of the same operations,
    drawn by the same rule. (Operations without constants have only a few tasks each; those the
    hidden split used up are not drawn again, so the final split has fewer of them.)"""
    generator = sibling("generator")
    seed, n_test = int(params["seed"]), int(params["n_test"])
    hidden = generator.generate("test", n_test + int(params.get("n_final", 0)), seed + 1)
    return generator.generate("valid", int(params["n_valid"]), seed), hidden[:n_test], hidden[n_test:]


def main() -> None:
    args = buildutil.parse_args(__doc__.splitlines()[0])
    params = buildutil.profile_params(HERE, args.profile)
    home, workspace, protected = buildutil.layout(args.out)
    if args.profile == "paper":
        valid, test = paper_problems(buildutil.need_assets(args) / "code_contests", params, args.out)
        final: Problems = []
    else:
        valid, test, final = generated_problems(params)
        trainer = sibling("train_model")
        summary = trainer.train(args.out / "model", seed=0, **trainer.PRESETS[params["train_preset"]])
        (args.out / "model" / "training.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    write_jsonl(workspace / "data" / "valid.jsonl", valid)
    write_jsonl(protected / "test.jsonl", test)
    if final:
        write_jsonl(protected / "final.jsonl", final)
    shutil.copy(HERE / "scoring" / "rust_eval.py", workspace / "rust_eval.py")
    start = "start_paper" if args.profile == "paper" else "start_tiny"
    shutil.copy(HERE / start / "solve_code_contests_rust.py", workspace / "solve_code_contests_rust.py")
    buildutil.write_params(home, args.profile, params)


if __name__ == "__main__":
    main()
