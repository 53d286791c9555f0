#!/usr/bin/env python3
"""rebench scoring helper: runs inside the sandbox, depends on nothing but the stdlib.

It runs the environment's scoring program in a child process group with a
timeout, and writes the result as JSON to a file the harness reads (never parsed
from stdout, which the solution under test could forge). It also appends a row to
the protected score log, the way RE-Bench's protected scoring does.

    score_helper.py --program score.py --params params.json --out result.json
                    [--log score.log] [--timeout 600] [--nonce-stdin]

With `--nonce-stdin` the first line of stdin is a nonce from the harness, written
into the result; the harness rejects a result without it. A second line, if not empty, is a
gateway token for this call only (the model gateway's `subject` meter), handed to the scoring
program as `ctx["call_token"]` for the submitted code it runs. Stdin of a non-dumpable
process of its own user is the one channel no other process can read (argv and the
environment's keys are visible in /proc, files can be raced).

The scoring program defines `score(ctx: dict) -> dict` returning
`{"raw": float | None, "message": {...}, "details": {...}}`.

The scoring process may read held-out data, so it must not run the agent's code
itself. It runs that code in a child started with `ctx["confine_command"]`:

    score_helper.py --confined [--user subject] --deny /protected [--scratch DIR] -- python worker.py ...

which (with `--user`) first becomes that user for good: its uid and gid, no
supplementary group (so not `protected`) and no capability left; this needs the
scorer to hold CAP_SETUID and CAP_SETGID (the Docker backend gives them to the
scorer as ambient capabilities and sets REBENCH_SUBJECT_USER), and failing it the
child does not run. The process keeps its pid, its open descriptors and its
parent, so the scoring program times and talks to it as before. Then it takes
away all access beneath the denied folders and every right to write outside its
scratch folder with Landlock (an unprivileged Linux security module, kernel 5.13+;
rebench/kit/landlock.py) and runs the command.
Its first line on stderr, written before the command starts, is
`rebench-confine: active`, or `rebench-confine: unavailable: why` where Landlock
is missing and the child runs unconfined; the scorer reports which.

`--audit-open FILE` (tests only) records every path the scoring process opens
(Python's `open` audit event) and writes them to FILE, one per line, at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
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


# -- confinement of the agent's code during scoring: rebench/kit/landlock.py -----------------------
def _landlock():  # the kit beside this file (its folder comes first on sys.path when run as a script)
    from rebench.kit import landlock

    return landlock


def confinement_unavailable() -> str | None:
    """Why this kernel cannot confine the agent's code during scoring, or None when it can.
    Containers share the host's kernel, so the harness asks once, on the host."""
    return _landlock().confinement_unavailable()


def confine_command(protected: str, user: str | None = None) -> list[str]:
    """The prefix a scoring program puts before a command that runs the agent's code
    (as `user`, where the backend gives the scorer the means to switch)."""
    return [sys.executable, os.path.abspath(__file__), "--confined", *(["--user", user] if user else []),
            "--deny", protected, "--"]


def _make_undumpable() -> None:
    """Close this process's memory and open files to other processes of the same user
    (/proc/PID/mem, /proc/PID/fd): the scorer holds held-out data the agent must not read."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4


def _record_opens(into: set[str]) -> None:
    """Add the absolute path of everything this process opens for reading from now on to `into`
    (opens that write or create are the scorer's own files). A relative path is taken against the
    working folder only where it names something there: one opened beside a folder descriptor
    (shutil.rmtree walks that way) cannot be placed and is left out."""
    def hook(event: str, args: tuple) -> None:
        if event != "open" or not args or not isinstance(args[0], (str, bytes)):
            return
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else os.O_RDONLY
        if flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_CREAT:
            return
        path = os.fsdecode(args[0])
        if not os.path.isabs(path):
            if not os.path.lexists(path):
                return
            path = os.path.abspath(path)
        into.add(path)

    sys.addaudithook(hook)


def _worker(program: str, params_path: str, out_path: str, audit: str | None = None,
            call_token_stdin: bool = False) -> int:
    """Child side: import the scoring program and call its `score(ctx)`."""
    _make_undumpable()
    opened: set[str] = set()
    if audit:
        _record_opens(opened)
    with open(params_path, encoding="utf-8") as handle:
        ctx = json.load(handle)
    if call_token_stdin:
        # A gateway token for this call only, for the submitted code the scorer runs (never the
        # scorer's own token): it dies with the call and is charged to the scorer's credit.
        ctx["call_token"] = sys.stdin.readline().strip()
    if ctx.get("protected"):
        subject = os.environ.get("REBENCH_SUBJECT_USER") or None
        ctx.setdefault("confine_command", confine_command(str(ctx["protected"]), subject))
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
    if audit:
        with open(audit, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{path}\n" for path in sorted(opened)))
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


def _run(args: argparse.Namespace, call_token: str = "") -> dict:
    """Run the scoring program in a worker process (its own session; on stdin only the call's
    gateway token, if any) with the timeout."""
    started = time.time()
    fd, child_out = tempfile.mkstemp(prefix="score-", suffix=".json", dir=os.path.dirname(args.out) or ".")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--program", args.program,
           "--params", args.params, "--out", child_out, *(["--audit-open", args.audit_open] if args.audit_open else []),
           *(["--call-token-stdin"] if call_token else [])]
    proc = subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.PIPE if call_token else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_worker_env(args.params))
    try:
        output, _ = proc.communicate(input=(call_token + "\n").encode() if call_token else None, timeout=args.timeout)
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
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--confined"]:
        return _landlock().run_confined(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True)
    parser.add_argument("--params", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--log")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--nonce-stdin", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--audit-open", help=argparse.SUPPRESS)
    parser.add_argument("--call-token-stdin", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args.program, args.params, args.out, args.audit_open, args.call_token_stdin)
    _make_undumpable()  # the nonce and the scoring program's output pass through this process
    nonce = sys.stdin.readline().strip() if args.nonce_stdin else None
    call_token = sys.stdin.readline().strip() if args.nonce_stdin else ""  # a second line: the call's gateway token
    result = _clean(_run(args, call_token))
    if nonce:
        result["nonce"] = nonce
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    os.replace(tmp, args.out)
    if args.log:
        _append_log(args.log, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
