"""Compiles and runs the generated Rust programs for the scorer, in a confined process.

score.py starts this file's source with `python -c` under the helper's confinement (the
`subject` user where the backend allows, /protected closed by Landlock). Before anything runs,
this process also takes the network away from itself and every program it starts: a new user
and network namespace where the kernel allows one (only a loopback that is down), and in any
case Landlock's TCP rules (no connect, no bind; kernel 6.7+) with its signal and abstract-socket
scopes (6.12+). Each program is compiled and run on its test inputs with the harness's time and
memory limits (rust_eval.run_program); only inputs come here, never expected outputs: the
scorer compares outputs itself.

    python -c SOURCE READ_FD WRITE_FD WORKERS

In: {"harness_source", "programs": [...], "inputs": [[...], ...], "test_timeout_s", "memory_bytes"}.
Out: {"network": how it was taken away} (with "error" when rustc is missing), then one
{"index": i, "compiled", "error", "runs"} per program.
"""

import ctypes
import os
import shutil
import sys
import types
from concurrent.futures import ThreadPoolExecutor, as_completed

from rebench.kit.confined import Channel

_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_SYS_CREATE_RULESET, _SYS_RESTRICT_SELF = 444, 446
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2


def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def new_network_namespace(libc):
    """A user + network namespace of our own, same uid and gid inside (unprivileged; refused in
    most containers, where there is no network to take away anyway)."""
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        return False
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    return True


def landlock_network(libc):
    """Landlock without any TCP right (and, where the kernel has them, the signal and abstract
    Unix socket scopes); returns its ABI, or 0 when the kernel cannot."""
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 4:
        return 0
    net = _NET_BIND_TCP | _NET_CONNECT_TCP
    attr = ((ctypes.c_uint64 * 3)(0, net, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6
            else (ctypes.c_uint64 * 2)(0, net))
    fd = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                      ctypes.c_uint32(0))
    if fd < 0:
        return 0
    try:
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            return 0
    finally:
        os.close(fd)
    return int(abi)


def deny_network():
    libc = ctypes.CDLL(None, use_errno=True)
    ways = []
    try:
        if new_network_namespace(libc):
            ways.append("network namespace")
    except OSError:
        pass
    abi = landlock_network(libc)
    if abi:
        ways.append(f"landlock tcp (abi {abi})")
    return ", ".join(ways) or "unavailable"


def main():
    channel = Channel(sys.argv)
    workers = max(1, int(channel.args[0]))
    network = deny_network()  # before any thread or program exists
    request = channel.receive()
    harness = types.ModuleType("rust_eval_scorer")
    exec(compile(request["harness_source"], "rust_eval.py", "exec"), harness.__dict__)
    if shutil.which(harness.RUSTC[0]) is None:
        channel.send({"network": network, "error": f"{harness.RUSTC[0]} is not installed where the scorer runs "
                                                    f"(PATH {os.environ.get('PATH', '')})"})
        return
    channel.send({"network": network})
    limits = {"test_timeout_s": request["test_timeout_s"], "memory_bytes": request["memory_bytes"]}
    with ThreadPoolExecutor(workers) as pool:
        futures = {pool.submit(harness.run_program, program, inputs, **limits): index
                   for index, (program, inputs) in enumerate(zip(request["programs"], request["inputs"], strict=True))
                   if program}
        for future in as_completed(futures):
            channel.send({"index": futures[future], **future.result()})


main()
