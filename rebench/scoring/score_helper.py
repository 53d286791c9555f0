#!/usr/bin/env python3
"""rebench scoring helper: runs inside the sandbox, depends on nothing but the stdlib.

It runs the environment's scoring program in a child process group with a
timeout, and writes the result as JSON to a file the harness reads (never parsed
from stdout, which the solution under test could forge). It also appends a row to
the protected score log, the way RE-Bench's protected scoring does.

    score_helper.py --program score.py --params params.json --out result.json
                    [--log score.log] [--timeout 600] [--nonce-stdin]

With `--nonce-stdin` the first line of stdin is a nonce from the harness, written
into the result; the harness rejects a result without it. Stdin of a non-dumpable
process of its own user is the one channel no other process can read (argv and the
environment's keys are visible in /proc, files can be raced).

The scoring program defines `score(ctx: dict) -> dict` returning
`{"raw": float | None, "message": {...}, "details": {...}}`.

The scoring process may read held-out data, so it must not run the agent's code
itself. It runs that code in a child started with `ctx["confine_command"]`:

    score_helper.py --confined [--user subject] --deny /protected -- python worker.py ...

which (with `--user`) first becomes that user for good: its uid and gid, no
supplementary group (so not `protected`) and no capability left; this needs the
scorer to hold CAP_SETUID and CAP_SETGID (the Docker backend gives them to the
scorer as ambient capabilities and sets REBENCH_SUBJECT_USER), and failing it the
child does not run. The process keeps its pid, its open descriptors and its
parent, so the scoring program times and talks to it as before. Then it takes
away all access beneath the denied folders with Landlock (an unprivileged Linux
security module, kernel 5.13+) and runs the command.
Its first line on stderr, written before the command starts, is
`rebench-confine: active`, or `rebench-confine: unavailable: why` where Landlock
is missing and the child runs unconfined; the scorer reports which.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import errno
import json
import math
import os
import pwd
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


# -- confinement of the agent's code during scoring (Landlock) ----------------------------------
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on x86-64 and arm64
_PR_SET_NO_NEW_PRIVS = 38
_RULE_PATH_BENEATH = 1
_FS_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2)  # execute, write file, read file
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_ONLY_EXTRA = {3: 1 << 14, 5: (1 << 14) | (1 << 15)}  # truncate, ioctl on devices


class ConfinementUnavailable(Exception):
    pass


def _landlock_abi(libc) -> int:
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 0:
        raise ConfinementUnavailable(f"Landlock is not available: {os.strerror(ctypes.get_errno())}")
    return int(abi)


def _allowed_roots(denied: list[str]) -> list[str]:
    """Every path beside the denied folders, walking down from / along their ancestors:
    a Landlock rule grants access beneath a folder, so an ancestor of a denied folder
    cannot get a rule itself, only its other children can."""
    denied_set = {os.path.realpath(d) for d in denied}
    ancestors = set()
    for path in denied_set:
        parent = os.path.dirname(path)
        while True:
            ancestors.add(parent)
            if parent == "/":
                break
            parent = os.path.dirname(parent)
    allowed, todo = [], ["/"]
    while todo:
        folder = todo.pop()
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            if path in denied_set:
                continue
            if path in ancestors:
                todo.append(path)
                continue
            real = os.path.realpath(path)
            if real != path and (real in ancestors or any(_beneath(real, d) for d in denied_set)):
                continue  # a symlink into (or above) a denied folder: a rule on it would open that folder
            allowed.append(path)
    return allowed


def _beneath(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def confine(denied: list[str]) -> None:
    """Remove all access beneath `denied` for this process and everything it runs."""
    libc = ctypes.CDLL(None, use_errno=True)
    abi = _landlock_abi(libc)
    rights = _FS_RIGHTS_BY_ABI[max(a for a in _FS_RIGHTS_BY_ABI if a <= abi)]
    file_rights = _FS_FILE_RIGHTS | _FILE_ONLY_EXTRA.get(max((a for a in _FILE_ONLY_EXTRA if a <= abi), default=0), 0)
    attr = ctypes.c_uint64(rights)  # struct landlock_ruleset_attr, v1 layout: handled_access_fs only
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        raise ConfinementUnavailable(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    try:
        for path in _allowed_roots(denied):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
                rule = PathBeneath(rights if is_dir else file_rights, fd)
                if libc.syscall(_SYS_ADD_RULE, ruleset, ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                                ctypes.c_uint32(0)) < 0:
                    error = ctypes.get_errno()
                    if error != errno.EINVAL:  # odd files (sockets at /) cannot carry rules: leave them closed
                        raise ConfinementUnavailable(f"landlock_add_rule {path}: {os.strerror(error)}")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise ConfinementUnavailable(f"prctl(NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            raise ConfinementUnavailable(f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)


_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAPABILITY_VERSION_3 = 0x20080522


class IdentityUnavailable(Exception):
    pass


def become(user: str) -> None:
    """Turn this process into `user` for good: uid and gid, no supplementary groups, no
    capabilities (permitted, effective, inheritable, ambient), HOME and USER to match."""
    try:
        entry = pwd.getpwnam(user)
        os.setgroups([])
        os.setresgid(entry.pw_gid, entry.pw_gid, entry.pw_gid)
        os.setresuid(entry.pw_uid, entry.pw_uid, entry.pw_uid)
    except (KeyError, OSError) as exc:
        raise IdentityUnavailable(f"cannot run as user {user}: {exc}") from None
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 or \
            libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:
        raise IdentityUnavailable(f"cannot drop capabilities: {os.strerror(ctypes.get_errno())}")
    with open("/proc/self/status", encoding="ascii") as handle:
        caps = [line.split()[1] for line in handle if line.startswith(("CapPrm", "CapEff", "CapAmb"))]
    if os.getresuid() != (entry.pw_uid,) * 3 or os.getgroups() not in ([], [entry.pw_gid]) or \
            any(int(c, 16) for c in caps):
        raise IdentityUnavailable(f"switching to user {user} did not take")
    os.environ.update(HOME=entry.pw_dir, USER=user, LOGNAME=user)
    os.environ.pop("REBENCH_SUBJECT_USER", None)


def _run_confined(argv: list[str]) -> int:
    """`--confined [--user NAME] --deny DIR [--deny DIR ...] -- CMD ...`: become NAME,
    confine, then exec CMD (same pid)."""
    user = None
    if argv[:1] == ["--user"] and len(argv) > 1:
        user, argv = argv[1], argv[2:]
    denied = []
    while argv and argv[0] == "--deny":
        denied.append(argv[1])
        argv = argv[2:]
    if not argv or argv[0] != "--" or len(argv) < 2 or not denied:
        print("usage: score_helper.py --confined [--user NAME] --deny DIR [--deny DIR ...] -- CMD ...",
              file=sys.stderr)
        return 2
    if user is not None:
        try:
            become(user)
        except IdentityUnavailable as exc:
            print(f"rebench-confine: refused: {exc}", file=sys.stderr, flush=True)
            return 126
    try:
        confine(denied)
    except ConfinementUnavailable as exc:
        print(f"rebench-confine: unavailable: {exc}", file=sys.stderr, flush=True)
    else:
        print("rebench-confine: active", file=sys.stderr, flush=True)  # first line, before any agent code runs
    os.execvp(argv[1], argv[1:])
    return 127


def confinement_unavailable() -> str | None:
    """Why this kernel cannot confine the agent's code during scoring, or None when it can.
    Containers share the host's kernel, so the harness asks once, on the host."""
    try:
        _landlock_abi(ctypes.CDLL(None, use_errno=True))
    except (ConfinementUnavailable, OSError, AttributeError) as exc:
        return str(exc)
    return None


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


def _worker(program: str, params_path: str, out_path: str) -> int:
    """Child side: import the scoring program and call its `score(ctx)`."""
    _make_undumpable()
    with open(params_path, encoding="utf-8") as handle:
        ctx = json.load(handle)
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
    """Run the scoring program in a worker process (its own session, no stdin) with the timeout."""
    started = time.time()
    fd, child_out = tempfile.mkstemp(prefix="score-", suffix=".json", dir=os.path.dirname(args.out) or ".")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--program", args.program,
           "--params", args.params, "--out", child_out]
    proc = subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=_worker_env(args.params))
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
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--confined"]:
        return _run_confined(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True)
    parser.add_argument("--params", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--log")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--nonce-stdin", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args.program, args.params, args.out)
    _make_undumpable()  # the nonce and the scoring program's output pass through this process
    nonce = sys.stdin.readline().strip() if args.nonce_stdin else None
    result = _clean(_run(args))
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
