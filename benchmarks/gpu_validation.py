"""Every `paper` profile built and scored end to end from small stand-ins for the operator's assets.

    python -m benchmarks.gpu_validation [--cpu] [--allow-version-mismatch] [--env NAME ...] [--work DIR]

For each environment with a `paper` profile: stand-in files in the assets' real formats
(benchmarks/standin_assets.py) are given to the harness's own build (`rebench.api.build_environment`:
the asset checks, the profile's virtualenv, build.py), then the starting and the reference solution
are scored by the environment's scorer in one local sandbox, the path `rebench envs calibrate`
takes (`scoring_sandbox`, `run_scoring`, `load_reference`), with the gateway in front of a stand-in
model where the profile has one. What is fitted to the stand-ins is listed in
benchmarks/paper_copy.py. Prints one Markdown table (environment, device, start and reference raw,
their ratio, seconds, result) and a line per failure; exits 1 if any environment failed, after all
of them ran. Raw scores come from stand-ins: they show that the pipeline runs, not the paper's anchors.

Without --cpu it needs a CUDA GPU and runs the profiles' devices as declared; --cpu runs every step
that does not need CUDA on the CPU (the device params set to cpu, sizes cut) and skips, saying so,
those that do. Nothing is downloaded: pip runs offline (PIP_NO_INDEX), so each profile's virtualenv
gets the packages installed here, and a pin they do not meet fails that environment unless
--allow-version-mismatch (implied by --cpu) uses the installed version and says which. A failure
the environment itself declares (its README or paper profile says its build is not written yet, or
that its build needs the network, and it failed for that) is reported and is not counted as one.
docs/gpu-validation.md says how to run it on a GPU machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from benchmarks.paper_copy import PROFILE, copy_environments, fitted_environment
from benchmarks.paper_standins import STANDINS, StandIn, StandInPool
from benchmarks.standin_server import StandInModel
from rebench.api import build_environment
from rebench.calibration import load_reference, scoring_sandbox
from rebench.environments.assets import verify
from rebench.environments.build import local_python
from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.gpus import gpu_ids
from rebench.preflight import system_packages
from rebench.sandbox.local import SYSTEM_PATH
from rebench.scoring.result import ScoreResult
from rebench.scoring.run import run_scoring

OFFLINE = {"PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
_SENTENCE = r"(?:[^.]|\.(?=\S))*"
"""Up to a full stop that ends a sentence (not the dots of `rebench.kit.owt`)."""
UNWRITTEN = re.compile(_SENTENCE + r"(?:not written yet|not buildable yet)" + _SENTENCE, re.IGNORECASE)
NEEDS_NETWORK = re.compile(_SENTENCE + r"\bneeds the\s+network\b" + _SENTENCE, re.IGNORECASE)
NETWORK_ERROR = re.compile(r"ConnectionError|NameResolution|name resolution|Name or service not known|"
                           r"Failed to resolve|Max retries exceeded|Network is unreachable")
PROBE = """import json, importlib.metadata as m
try:
    import torch
    found = {"torch": torch.__version__, "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
except ImportError:
    found = {"torch": None, "cuda": None}
try:
    found["triton"] = m.version("triton")
except m.PackageNotFoundError:
    found["triton"] = None
print(json.dumps(found))"""


@dataclass
class Row:
    environment: str
    status: str = "FAILED"
    """ok, FAILED, skipped (needs CUDA, --cpu), unwritten or offline (declared by the environment)."""
    device: str = "-"
    start: float | None = None
    reference: float | None = None
    seconds: float = 0.0
    note: str = ""
    error: str = ""

    @property
    def ratio(self) -> str:
        if self.start is None or self.reference is None or self.start == 0:
            return "-"
        return f"{self.reference / self.start:.3f}"


_BEGAN = time.monotonic()


def progress(text: str) -> None:
    print(f"[{time.monotonic() - _BEGAN:5.0f}s] {text}", file=sys.stderr, flush=True)


def declared(env: Environment, error: str) -> tuple[str, str] | None:
    """(status, the sentence) when the environment's own README or paper profile declares why this
    failure happens: a build that is not written yet, or a build that needs the network (then only
    for a network error)."""
    readme = env.root / "README.md"
    texts = [env.profile(PROFILE).description, readme.read_text(encoding="utf-8") if readme.is_file() else ""]
    checks = [("unwritten", UNWRITTEN, True), ("offline", NEEDS_NETWORK, bool(NETWORK_ERROR.search(error)))]
    for status, pattern, applies in checks:
        for source, text in zip(("environment.toml", "README.md"), texts, strict=True):
            found = pattern.search(text) if applies else None
            if found:
                sentence = " ".join(found.group(0).split())
                return status, f'{source}: "{sentence[:150]}"'
    return None


def probe(env: Environment) -> dict[str, str | None]:
    """The torch, triton and CUDA device the profile's virtualenv sees."""
    python = local_python(env, PROFILE, build=False)
    done = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RebenchError(f"probing the virtualenv's packages failed: {done.stderr.strip()[-300:]}")
    found: dict[str, str | None] = json.loads(done.stdout)
    return found


async def score_both(env: Environment) -> tuple[ScoreResult, ScoreResult]:
    """The starting solution, then the reference (its run.sh run first), scored in one sandbox."""
    timeout_s = env.profile(PROFILE).score_timeout_s
    async with scoring_sandbox(env, PROFILE, "local") as (sandbox, gateway):
        start = await run_scoring(sandbox, timeout_s, gateway)
        progress(f"  start: {start.raw}")
        await load_reference(sandbox, env, log=lambda text: progress(f"  {text}"))
        reference = await run_scoring(sandbox, timeout_s, gateway)
        progress(f"  reference: {reference.raw}")
    return start, reference


def invalid(label: str, result: ScoreResult) -> str:
    message = result.message.get("error") or result.message
    stderr = str(result.details.get("stderr", "")).strip().splitlines()
    return f"{label} solution scored invalid: {message}" + (f" ({stderr[-1]})" if stderr else "")


def run_one(row: Row, env: Environment, standin: StandIn, args: argparse.Namespace, pool: StandInPool,
            copies: Path) -> None:
    """Fill `row` for one environment; raises on the first failure."""
    assets = {name: pool.get(file) for name, file in standin.assets.items()}
    with contextlib.ExitStack() as stack:
        model = stack.enter_context(StandInModel(standin.answer)) if standin.answer else None
        fitted, notes = fitted_environment(copies, env.name, standin, assets, cpu=args.cpu,
                                           relax=args.cpu or args.allow_version_mismatch,
                                           model_url=model.url if model else None)
        if args.cpu and standin.cuda_only:
            verify(fitted, PROFILE, assets)
            row.status = "skipped"
            row.note = f"needs CUDA: {standin.cuda_only}; only the stand-in assets were checked"
            return
        missing = [name for name in system_packages(fitted) if shutil.which(name, path=SYSTEM_PATH) is None]
        if missing:  # what the local backend's preflight checks before a run
            raise RebenchError(f"needs {', '.join(missing)} on the sandboxes' PATH ({SYSTEM_PATH}): "
                               f"apt-get install -y {' '.join(missing)}")
        pins = f"pins not met, installed versions used: {', '.join(notes)}" if notes else ""
        progress(f"  building; {pins or 'requirements as pinned'}")
        build_environment(fitted, PROFILE, "local", assets=assets)
        progress("  built")
        uses_gpu = not args.cpu and fitted.profile(PROFILE).resources.gpus > 0
        kernel = env.name == "triton_cumsum"
        found = probe(fitted) if uses_gpu or kernel else {}
        if uses_gpu and not found["cuda"]:
            raise RebenchError(f"the paper virtualenv's PyTorch ({found['torch']}) sees no CUDA device")
        row.device = str(found["cuda"]) if uses_gpu else "cpu"
        in_use = f"in use: torch {found.get('torch')}, triton {found.get('triton') or 'not installed'}"
        row.note = "; ".join(part for part in (in_use if kernel else "", pins) if part)
        start, reference = asyncio.run(score_both(fitted))
        row.start, row.reference = start.raw, reference.raw
        for label, result in (("starting", start), ("reference", reference)):
            if result.raw is None:
                raise RebenchError(invalid(label, result))
        row.status = "ok"


def last_line(exc: BaseException) -> str:
    """The exception in one line. A harness error that quotes a program's output (a failed build
    joins its last lines with " | ", a failed run.sh gives its stderr) keeps its own words up to
    "failed" and the output's last line, the traceback's own last line."""
    lines = f"{type(exc).__name__}: {exc}".strip().splitlines()
    head, tail = lines[0], lines[-1].rsplit(" | ", 1)[-1].strip()
    found = re.match(r".*? failed(?: \(exit -?\d+\))?:", head)
    if found and (len(lines) > 1 or " | " in head):
        return f"{found.group(0)} ... {tail}"
    return head if len(lines) == 1 else f"{head} ... {tail}"


def validate(env: Environment, args: argparse.Namespace, pool: StandInPool, copies: Path) -> Row:
    row = Row(env.name)
    started = time.monotonic()
    progress(f"== {env.name}")
    standin = STANDINS.get(env.name)
    try:
        if standin is None:
            raise RebenchError("no stand-ins for this environment in benchmarks/paper_standins.py")
        run_one(row, env, standin, args, pool, copies)
    except Exception as exc:
        row.error = last_line(exc)
        progress(traceback.format_exc())
        why = declared(env, row.error)
        if why is not None:
            row.status = why[0]
            row.note = f"declared in {why[1]}; failed with {row.error[:300]}"
    row.seconds = time.monotonic() - started
    progress(f"  {row.status} in {row.seconds:.0f} s" + (f": {row.error}" if row.error else ""))
    return row


def stop(signum: int, frame: object) -> None:
    """SIGTERM (`timeout`) ends the run as Ctrl-C does, so the rows done so far are still printed."""
    raise KeyboardInterrupt


def cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def table(rows: list[Row]) -> str:
    lines = ["| environment | device | start raw | reference raw | ratio | seconds | result |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        result = (row.status + (f": {row.note}" if row.note else "")).replace("|", "\\|")
        lines.append(f"| {row.environment} | {row.device} | {cell(row.start)} | {cell(row.reference)} | {row.ratio} "
                     f"| {row.seconds:.0f} | {result} |")
    return "\n".join(lines)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true",
                        help="run every step that does not need CUDA on the CPU; skip (and say so) those that do")
    parser.add_argument("--allow-version-mismatch", action="store_true",
                        help="build each virtualenv with the installed versions of packages whose pins they miss "
                             "(listed in the result); implied by --cpu")
    parser.add_argument("--env", action="append", default=[], help="only this environment (repeatable)")
    parser.add_argument("--work", type=Path, help="keep the stand-ins, builds and sandboxes here (default: a "
                                                  "temporary folder, removed at the end)")
    return parser.parse_args()


def main() -> int:
    args = arguments()
    if not args.cpu and not gpu_ids():
        progress("no GPU here (nvidia-smi -L lists none): run with --cpu")
        return 2
    registry = EnvironmentRegistry()
    envs = [env for env in registry.all() if PROFILE in env.metadata.profiles]
    unknown = sorted(set(args.env) - {env.name for env in envs})
    if unknown:
        progress(f"no paper profile in {', '.join(unknown)}; allowed: {', '.join(env.name for env in envs)}")
        return 2
    envs = [env for env in envs if not args.env or env.name in args.env]
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-validation-"))
    copies = work / "environments"
    shutil.rmtree(copies, ignore_errors=True)
    copy_environments(registry.root, copies)
    # Builds, virtualenvs and sandboxes in the work folder: stand-in builds never reach the real cache.
    os.environ.update({**OFFLINE, "REBENCH_CACHE": str(work / "cache"), "REBENCH_ASSETS": str(work / "no-assets.toml")})
    started = time.monotonic()
    signal.signal(signal.SIGTERM, stop)
    rows: list[Row] = []
    try:
        pool = StandInPool(work / "standins")
        for env in envs:
            rows.append(validate(env, args, pool, copies))
    except KeyboardInterrupt:
        progress("interrupted")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows))
    failed = [row for row in rows if row.status == "FAILED"]
    for row in failed:
        print(f"FAILED {row.environment}: {row.error}")
    ran = f"{len(rows)} environments" if len(rows) == len(envs) else f"interrupted after {len(rows)} of {len(envs)}"
    print(f"{ran}, {len(failed)} failed, {time.monotonic() - started:.0f} s ({'--cpu' if args.cpu else 'GPU'} run)")
    return 1 if failed or len(rows) < len(envs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
