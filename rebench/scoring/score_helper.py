#!/usr/bin/env python3
"""rebench scoring helper: runs inside the sandbox, depends on nothing but the stdlib.

It runs the environment's scoring program in a child process group with a
timeout, and writes the result as JSON to a file the harness reads (never parsed
from stdout, which the solution under test could forge). It also appends a row to
the protected score log, the way RE-Bench's protected scoring does.

    score_helper.py --program score.py --params params.json --out result.json
                    [--log score.log] [--timeout 600]

The scoring program defines `score(ctx: dict) -> dict` returning
`{"raw": float | None, "message": {...}, "details": {...}}`.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback


def _clean(value):
    """JSON has no NaN: map non-finite floats to None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _worker(program: str, params_path: str, out_path: str) -> int:
    """Child side: import the scoring program and call its `score(ctx)`."""
    with open(params_path, encoding="utf-8") as handle:
        ctx = json.load(handle)
    program_dir = os.path.dirname(os.path.abspath(program))
    sys.path.insert(0, program_dir)
    try:
        namespace = runpy.run_path(program, run_name="rebench_score")
        result = namespace["score"](ctx)
        if not isinstance(result, dict):
            raise TypeError(f"score() returned {type(result).__name__}, expected dict")
        raw = result.get("raw")
        raw = float(raw) if raw is not None else None
        payload = {"raw": raw, "message": result.get("message", {}), "details": result.get("details", {})}
    except Exception as exc:  # a broken solution is an invalid score, not a crash
        payload = {
            "raw": None,
            "message": {"error": f"{type(exc).__name__}: {exc}"[:2000]},
            "details": {"traceback": traceback.format_exc()[-8000:]},
        }
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(_clean(payload), handle)
    return 0


def _worker_env(params_path: str) -> dict:
    """The scoring process's environment, plus the profile's `scoring_env` (for example
    allocator settings that damp timing noise); only string values are accepted."""
    env = dict(os.environ)
    try:
        with open(params_path, encoding="utf-8") as handle:
            extra = json.load(handle).get("scoring_env") or {}
    except (OSError, ValueError, AttributeError):
        extra = {}
    if isinstance(extra, dict):
        env.update({str(k): str(v) for k, v in extra.items()})
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _run(args: argparse.Namespace) -> dict:
    started = time.time()
    fd, child_out = tempfile.mkstemp(prefix="score-", suffix=".json", dir=os.path.dirname(args.out) or ".")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--program", args.program,
           "--params", args.params, "--out", child_out]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=_worker_env(args.params))
    try:
        output, _ = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        os.unlink(child_out)
        return {"raw": None, "message": {"timeout": True}, "details": {"timeout_s": args.timeout},
                "duration_s": time.time() - started, "timestamp": started}
    finally:
        if proc.poll() is None:
            _kill_group(proc)
    tail = output.decode("utf-8", errors="replace")[-4000:] if output else ""
    try:
        with open(child_out, encoding="utf-8") as handle:
            result = json.load(handle)
    except (OSError, ValueError):
        killed = proc.returncode in (-signal.SIGKILL, 137)
        message = {"out_of_memory": True} if killed else {"error": f"scoring exited with {proc.returncode}"}
        result = {"raw": None, "message": message, "details": {"output": tail}}
    finally:
        if os.path.exists(child_out):
            os.unlink(child_out)
    result.setdefault("details", {})["output_tail"] = tail
    result["duration_s"] = time.time() - started
    result["timestamp"] = started
    return result


def _append_log(path: str, result: dict) -> None:
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        if new:
            writer.writerow(["timestamp", "score", "message", "details"])
        raw = result.get("raw")
        writer.writerow([result["timestamp"], "nan" if raw is None else raw,
                         json.dumps(result.get("message", {})), json.dumps(result.get("details", {}))[:4000]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True)
    parser.add_argument("--params", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--log")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args.program, args.params, args.out)
    result = _clean(_run(args))
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    os.replace(tmp, args.out)
    if args.log:
        _append_log(args.log, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
