"""Confining the agent's code during scoring (stdlib only): what `score_helper.py --confined` does.

    score_helper.py --confined [--user NAME] --deny DIR [--deny DIR ...] [--scratch DIR] -- CMD ...

becomes NAME for good (`become`: uid, gid, no supplementary group, no capability), then applies a
Landlock ruleset (`confine`) and execs CMD with the same pid. The ruleset lets the command read
and execute everything but the denied folders, and write, create, remove, rename or truncate
only beneath its scratch folder: the one given with `--scratch` (the scorer's ConfinedChild makes
a fresh one per child), else a fresh one it makes itself after the switch. HOME, TMPDIR, TMP and
TEMP point there. Besides the scratch it may open the character devices in /dev for writing
(/dev/null, a GPU's device files; never /dev/mqueue) and write to or truncate /proc files (a user
namespace's id maps; what CUDA's driver writes when it starts), neither of which keeps anything
for the agent, and it may use /dev/shm:
POSIX semaphores and shared memory (multiprocessing's locks, data loader workers) live there
and have no other place. So the code cannot leave a copy of what it was shown in /tmp, its own
home or any file or folder the agent owns, whatever their modes; whoever removes the scratch
after the call (the scorer, the Docker exec server as root) removes all it could write there.
/dev/shm is made safe around the call instead: the Docker exec server closes the agent's own
entries there to other users while the agent is frozen (so no 0666 file of the agent's can be
written), and removes every entry of the scoring users when the call ends; ConfinedChild removes
the new entries it can when the child is closed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import pwd
import stat
import sys
import tempfile

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on x86-64 and arm64
_PR_SET_NO_NEW_PRIVS = 38
_RULE_PATH_BENEATH = 1
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_READ_ONLY = _EXECUTE | _READ_FILE | _READ_DIR
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_ONLY_EXTRA = {3: 1 << 14, 5: (1 << 14) | (1 << 15)}  # truncate, ioctl on devices
_NO_WRITE_IN_DEV = ("shm", "mqueue")  # shared folders where a file would outlive the call (shm: its own rule)
SHARED_MEMORY = "/dev/shm"
_SCRATCH_ENV = ("HOME", "TMPDIR", "TMP", "TEMP")


class ConfinementUnavailable(Exception):
    pass


class IdentityUnavailable(Exception):
    pass


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi(libc: ctypes.CDLL) -> int:
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 0:
        raise ConfinementUnavailable(f"Landlock is not available: {os.strerror(ctypes.get_errno())}")
    return int(abi)


def _beneath(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def allowed_roots(denied: list[str]) -> list[str]:
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


def _rules(denied: list[str], scratch: str, rights: int, file_rights: int) -> list[tuple[str, int, int]]:
    """(path, rights if a folder, rights if a file) for every rule of the ruleset."""
    rules: list[tuple[str, int, int]] = []
    for path in allowed_roots(denied):
        if path == "/dev":
            for name in sorted(os.listdir(path)):
                try:
                    mode = os.lstat(os.path.join(path, name)).st_mode
                except OSError:
                    continue
                if name not in _NO_WRITE_IN_DEV and (stat.S_ISDIR(mode) or stat.S_ISCHR(mode)):
                    rules.append((os.path.join(path, name), _READ_ONLY | _WRITE_FILE, file_rights))
            if os.path.isdir(SHARED_MEMORY) and not os.path.islink(SHARED_MEMORY):
                rules.append((SHARED_MEMORY, rights, file_rights))
            rules.append((path, _READ_ONLY, _EXECUTE | _READ_FILE))
        elif path == "/proc":
            # every right a file has here (writing, and truncating: CUDA's driver opens a /proc file
            # with O_TRUNC when it starts, and without that right cudaGetDeviceCount fails with
            # error 304, seen on an H200), but no making or removing: /proc keeps nothing written
            rules.append((path, file_rights | _READ_DIR, file_rights))
        else:
            rules.append((path, _READ_ONLY, _EXECUTE | _READ_FILE))
    if not any(_beneath(os.path.realpath(scratch), os.path.realpath(d)) for d in denied):
        rules.append((scratch, rights, file_rights))
    return rules


def confine(denied: list[str], scratch: str) -> None:
    """For this process and everything it runs: no access beneath `denied`, reading and executing
    elsewhere, writing only beneath `scratch` (and the device and /proc files named above)."""
    libc = _libc()
    abi = landlock_abi(libc)
    rights = _FS_RIGHTS_BY_ABI[max(a for a in _FS_RIGHTS_BY_ABI if a <= abi)]
    file_rights = _EXECUTE | _WRITE_FILE | _READ_FILE | \
        _FILE_ONLY_EXTRA.get(max((a for a in _FILE_ONLY_EXTRA if a <= abi), default=0), 0)
    attr = ctypes.c_uint64(rights)  # struct landlock_ruleset_attr, v1 layout: handled_access_fs only
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        raise ConfinementUnavailable(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    try:
        for path, folder_rights, single_file_rights in _rules(denied, scratch, rights, file_rights):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
                rule = PathBeneath((folder_rights if is_dir else single_file_rights) & rights, fd)
                if libc.syscall(_SYS_ADD_RULE, ruleset, ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                                ctypes.c_uint32(0)) < 0:
                    error = ctypes.get_errno()
                    if error not in (errno.EINVAL, errno.EBADFD):  # odd files (sockets, pipes) carry no rules
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
    libc = _libc()
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


def _scratch_for_this_user(given: str | None) -> str:
    """The scratch folder: `given` when it is a folder this user may enter (the caller may have
    laid it out with only some subfolders writable, as LLM Foundry's scorer does: the run must not
    replace the training file beside its copy), else a fresh private one."""
    if given:
        info = os.lstat(given)
        if stat.S_ISDIR(info.st_mode) and os.access(given, os.X_OK):
            return given
        raise ConfinementUnavailable(f"the scratch folder {given} is not a folder this user can enter")
    return tempfile.mkdtemp(prefix="rebench-scratch-")


USAGE = "usage: score_helper.py --confined [--user NAME] --deny DIR [--deny DIR ...] [--scratch DIR] -- CMD ..."


def run_confined(argv: list[str]) -> int:
    """`--confined [--user NAME] --deny DIR ... [--scratch DIR] -- CMD ...`: become NAME, point
    the scratch variables at the scratch folder, confine, then exec CMD (same pid)."""
    user, scratch, denied = None, None, []
    while len(argv) > 1 and argv[0] in ("--user", "--deny", "--scratch"):
        if argv[0] == "--user":
            user = argv[1]
        elif argv[0] == "--scratch":
            scratch = argv[1]
        else:
            denied.append(argv[1])
        argv = argv[2:]
    if not argv or argv[0] != "--" or len(argv) < 2 or not denied:
        print(USAGE, file=sys.stderr)
        return 2
    if user is not None:
        try:
            become(user)
        except IdentityUnavailable as exc:
            print(f"rebench-confine: refused: {exc}", file=sys.stderr, flush=True)
            return 126
    try:
        folder = _scratch_for_this_user(scratch)
    except (OSError, ConfinementUnavailable) as exc:
        print(f"rebench-confine: refused: no scratch folder: {exc}", file=sys.stderr, flush=True)
        return 126
    home = os.environ.get("HOME", "")
    for name, default in (("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")):  # toolchains found from HOME
        if name not in os.environ and home and os.path.isdir(os.path.join(home, default)):
            os.environ[name] = os.path.join(home, default)
    if os.access(folder, os.W_OK):  # else the caller points them at the writable parts itself
        os.environ.update({name: folder for name in _SCRATCH_ENV})
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"):
        os.environ.pop(name, None)
    try:
        confine(denied, folder)
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
        landlock_abi(_libc())
    except (ConfinementUnavailable, OSError, AttributeError) as exc:
        return str(exc)
    return None
