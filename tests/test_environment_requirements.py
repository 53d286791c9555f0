"""Every environment's requirements cover what its build, scorer and solutions import.

A missing line shows only on a machine whose harness lacks the package: `rust_codecontests_inference`
listed `openai` alone while its build trains a model with torch, which CI's harness happened to have.
The static checker `../shared/tools/undeclared-imports` (from the project's shared folder) reads each
environment's code against a pyproject.toml made from its requirements, one run per requirements
file: the profiles that read that file, and that file's code (the environment's Python files, less
tests/ and the folders named for another profile: workspace-paper/, start_tiny/, ...).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rebench.environments.registry import Environment, EnvironmentRegistry

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO.parent / "shared" / "tools" / "undeclared-imports"
FINDING = re.compile(r"^undeclared import '([^']+)': (\S+) \((module top level|inside a function or block)\)")

PROVIDED = {
    "rebench": "the environment kit (rebench.kit), which the harness ships beside every build and scorer "
               "(rebench/harness_files.py); a local model's module is loaded by the harness's gateway itself",
}
"""Modules no requirements file installs. The standard library the checker knows itself; the base
images add nothing else to Python (dockerfiles/base-*.Dockerfile)."""

NOT_RUN_BY = {
    ("rust_codecontests_inference", "paper"): {
        "torch": "train_model.py trains tiny's and ci's local model; paper calls gpt-3.5-turbo upstream",
        "numpy": "model.py and train_model.py are tiny's and ci's local model, which paper does not have",
    },
    ("optimize_llm_foundry", "paper"): {
        "numpy": "generator.py writes tiny's and ci's training rows; paper's come from the operator's assets",
    },
}
"""(environment, profile) -> modules that code outside a profile folder imports but that profile never
runs (its build takes another branch): the checker cannot see which branch a build takes."""


def _environments() -> list[Path]:
    fixtures = [path for kind in ("envs", "docker_envs") for path in (REPO / "tests" / "fixtures" / kind).iterdir()]
    bundled = [REPO / "environments" / name for name in EnvironmentRegistry(REPO / "environments").names()]
    return sorted([*bundled, *(path for path in fixtures if (path / "environment.toml").is_file())])


def _requirement_lines(path: Path | None) -> list[str]:
    if path is None:
        return []
    lines = (line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def _code_of(env: Environment, profiles: set[str]) -> list[Path]:
    """The Python files these profiles may run: all but tests/ and other profiles' folders."""
    others = tuple(f"{sep}{other}" for other in set(env.metadata.profiles) - profiles for sep in "-_")

    def taken(path: Path) -> bool:
        parts = path.relative_to(env.root).parts[:-1]
        return not any(part in {"tests", "__pycache__"} or part.endswith(others) for part in parts)

    return [path for path in sorted(env.root.rglob("*.py")) if taken(path)]


def _own_modules(env: Environment) -> set[str]:
    """The environment's own modules, which its files import from beside them (sys.path or a copy)."""
    return {path.stem for path in env.root.rglob("*.py")} | {path.parent.name for path in env.root.rglob("__init__.py")}


def _top_level_imports(files: list[Path]) -> set[str]:
    """Modules some file imports at its top level (the others are imported only where a branch runs)."""
    found: set[str] = set()
    for path in files:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def undeclared(files: list[Path], root: Path, requirements: list[str], scratch: Path) -> dict[str, str]:
    """The checker's findings for `files` against `requirements`: module -> where it is imported."""
    if scratch.exists():
        shutil.rmtree(scratch)
    code = scratch / "environment"
    for path in files:
        (code / path.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, code / path.relative_to(root))
    code.mkdir(parents=True, exist_ok=True)
    deps = ", ".join(f'"{line}"' for line in requirements)
    (scratch / "pyproject.toml").write_text(f'[project]\nname = "env"\nversion = "0"\ndependencies = [{deps}]\n')
    # The harness's interpreter, whose installed distributions tell module names from distribution
    # names (yaml is PyYAML's) and what a declared distribution brings along.
    done = subprocess.run([sys.executable, str(TOOL), "environment"], cwd=scratch, capture_output=True, text=True,
                          timeout=120)
    found = {m.group(1): f"{m.group(2)} ({m.group(3)})" for m in map(FINDING.match, done.stdout.splitlines()) if m}
    assert done.returncode == (1 if found else 0), done.stdout + done.stderr
    return found


def problems_of(env: Environment, scratch: Path) -> list[str]:
    """One line per module a profile's code imports that its requirements file does not declare."""
    groups: dict[Path | None, set[str]] = {}
    for profile in env.metadata.profiles:
        groups.setdefault(env.requirements(profile), set()).add(profile)
    everything = sorted({line for path in groups for line in _requirement_lines(path)})
    own = _own_modules(env)
    problems = []
    for index, (path, profiles) in enumerate(groups.items()):
        files = _code_of(env, profiles)
        found = undeclared(files, env.root, _requirement_lines(path), scratch / str(index))
        found = {mod: where for mod, where in found.items() if mod not in own and mod not in PROVIDED
                 and not all(mod in NOT_RUN_BY.get((env.name, p), {}) for p in profiles)}
        # imported only inside a function: the optional feature of another profile, when one declares it
        optional = set(found) - _top_level_imports(files)
        if optional:
            anywhere = undeclared(files, env.root, everything, scratch / f"{index}-all")
            found = {mod: where for mod, where in found.items() if mod not in optional or mod in anywhere}
        file = path.name if path else "no requirements file"
        problems += [f"{env.name} (profiles {', '.join(sorted(profiles))}; {file}): undeclared import {mod!r} "
                     f"in {where}" for mod, where in sorted(found.items())]
    return sorted(problems)


@pytest.mark.parametrize("folder", _environments(), ids=lambda path: path.name)
def test_requirements_cover_imports(folder: Path, tmp_path: Path) -> None:
    if not TOOL.is_file():
        pytest.skip(f"{TOOL} is not here (the project's shared folder beside the checkout)")
    env = EnvironmentRegistry(folder.parent).get(folder.name)
    assert problems_of(env, tmp_path) == []


def test_a_missing_requirement_is_named(tmp_path: Path) -> None:
    """The check fails as it would have for rust_codecontests_inference: a build importing torch at its
    top level beside requirements that list openai alone; paper's own file, which lists torch, does not
    excuse tiny's, and paper's folder is paper's only."""
    if not TOOL.is_file():
        pytest.skip(f"{TOOL} is not here (the project's shared folder beside the checkout)")
    source = REPO / "tests" / "fixtures" / "envs" / "counter"
    folder = tmp_path / "envs" / "counter"
    shutil.copytree(source, folder)
    (folder / "requirements.txt").write_text("openai\n")
    (folder / "requirements-paper.txt").write_text("openai\ntorch==2.13.0\ntiktoken\n")
    (folder / "build.py").write_text("import openai\nimport torch\n\n\ndef paper():\n    import tiktoken\n")
    (folder / "start_paper").mkdir()
    (folder / "start_paper" / "solve.py").write_text("import openai\nimport numba\n")
    profile = ('resources = { gpus = 0, cpus = 1, memory_gb = 1 }\ndirection = "higher"\nfinal_score = "best"\n'
               'score_timeout_s = 5\nanchors = { start = 1.0, reference = 11.0, source = "by construction" }\n'
               'params = { secret_file = "answer.txt" }\n')
    (folder / "environment.toml").write_text('name = "counter"\ntitle = "Counter"\nversion = "1.0.0"\nsummary = "."\n'
                                             f"[profiles.tiny]\n{profile}[profiles.paper]\n{profile}")
    env = EnvironmentRegistry(folder.parent).get("counter")
    problems = problems_of(env, tmp_path / "scratch")
    assert problems == [
        "counter (profiles paper; requirements-paper.txt): undeclared import 'numba' in "
        "environment/start_paper/solve.py (module top level)",
        "counter (profiles tiny; requirements.txt): undeclared import 'torch' in "
        "environment/build.py (module top level)",
    ]
