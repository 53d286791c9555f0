"""The environment benchmarks/gpu_validation.py builds: a scratch copy of the environments folder
with one environment's `paper` profile fitted to its stand-ins (benchmarks/paper_standins.py).

What changes, and nothing else: the profile's params (laid over in memory, as `rebench run
--env-param` does, so the build and the scorer get them through the harness), each pinned asset's
sha256 (the stand-in's, so the harness's asset check passes for the file given), the gateway's
upstream (the stand-in model's URL), the `paper` entry of the reference plan file, and, with
`relax` (--allow-version-mismatch), requirement pins the installed packages do not meet (the
machine has no network to install the pinned ones).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
from pathlib import Path

from benchmarks.paper_standins import StandIn
from rebench.environments.assets import sha256_of
from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.errors import RebenchError

PROFILE = "paper"
CUDA_ONLY_PACKAGES = frozenset({"triton"})
"""Left out of a --cpu run's virtualenv when not installed: no CPU step imports them."""
PLAN_FILE = "reference_plan.json"


def copy_environments(source: Path, target: Path) -> Path:
    """All environment folders (a build may read a sibling's: nanogpt_chat_rl loads fix_embedding's
    build.py), without their tests and caches."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "tests", ".pytest_cache"))
    return target


def _release(version: str) -> tuple[int, ...]:
    found = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in found.group(0).split(".")) if found else ()


def _meets(installed: str, op: str, wanted: str) -> bool:
    """Whether an installed version meets one specifier (release numbers only; enough for the
    pins the environments write: ==X.Y.Z, <N)."""
    have, want = _release(installed), _release(wanted)
    width = max(len(have), len(want))
    have, want = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
    return {"==": have == want, "!=": have != want, "<": have < want, "<=": have <= want, ">": have > want,
            ">=": have >= want, "~=": have >= want}[op]


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def fit_requirements(path: Path, *, relax: bool, cpu: bool) -> list[str]:
    """Check (and with `relax` rewrite) a requirements file against what this machine has
    installed, which is all an offline virtualenv can get. Returns notes on what was changed;
    raises RebenchError naming each requirement that cannot be met."""
    notes, problems, lines = [], [], []
    mismatch = False
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.split("#", 1)[0].strip()
        found = re.match(r"([A-Za-z0-9][A-Za-z0-9_.\-]*)(\[[^\]]*\])?\s*(.*)$", text)  # not "-r FILE" lines
        if not found:
            lines.append(line)
            continue
        name, specifiers = found.group(1), found.group(3)
        pins = re.findall(r"(==|!=|<=|>=|~=|<|>)\s*([^,\s]+)", specifiers)
        version = _installed(name)
        if version is None:
            if cpu and name.lower() in CUDA_ONLY_PACKAGES:
                notes.append(f"{name}{specifiers} -> not installed (CUDA only)")
                continue
            problems.append(f"{name} is not installed and pip cannot fetch it offline")
        elif not all(_meets(version, op, wanted) for op, wanted in pins):
            if relax:
                notes.append(f"{name}{specifiers} -> {version}")
                line = name
            else:
                mismatch = True
                problems.append(f"{name} {version} is installed, {path.name} pins {specifiers}")
        lines.append(line)
    if problems:
        hint = " (--allow-version-mismatch uses the installed versions)" if mismatch else ""
        raise RebenchError("; ".join(problems) + hint)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return notes


def fitted_environment(copies: Path, name: str, standin: StandIn, assets: dict[str, Path], *, cpu: bool,
                       relax: bool, model_url: str | None) -> tuple[Environment, list[str]]:
    """The copy's environment with its paper profile fitted to the stand-ins, and the notes of
    fit_requirements (the copy's requirements file is rewritten in place when relaxed)."""
    env = EnvironmentRegistry(copies).get(name)
    spec = env.profile(PROFILE)
    notes: list[str] = []
    requirements = env.requirements(PROFILE)
    if requirements is not None and standin.cuda_only is None:
        notes = fit_requirements(requirements, relax=relax, cpu=cpu)
    plan = env.reference_dir / PLAN_FILE if env.reference_dir else None
    if standin.plan is not None and plan is not None and plan.is_file():
        plans = json.loads(plan.read_text(encoding="utf-8"))
        plan.write_text(json.dumps({**plans, PROFILE: standin.plan}, indent=2) + "\n", encoding="utf-8")
    params = {**spec.params, **standin.params, **(standin.cpu_params if cpu else {})}
    unknown = sorted(set(params) - set(spec.params))
    if unknown:
        raise RebenchError(f"stand-in params {', '.join(unknown)} are not params of {name}'s paper profile")
    pinned = [asset.model_copy(update={"sha256": sha256_of(assets[asset.name])})
              if asset.sha256 != "unpinned" and asset.name in assets else asset for asset in spec.assets]
    update: dict[str, object] = {"params": params, "assets": pinned}
    if spec.gateway is not None:
        if model_url is None:
            raise RebenchError(f"{name}'s paper profile has a gateway and its stand-in no model")
        model = spec.gateway.upstream.partition("/")[2]
        update["gateway"] = spec.gateway.model_copy(update={"upstream": f"openai-compatible/{model}",
                                                            "base_url": model_url})
    profiles = {**env.metadata.profiles, PROFILE: spec.model_copy(update=update)}
    metadata = env.metadata.model_copy(update={"profiles": profiles})
    return Environment(root=env.root, metadata=metadata, overridden=env.overridden | {PROFILE}), notes
