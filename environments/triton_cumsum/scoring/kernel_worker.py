"""Runs the agent's `prefix_sum` for the scorer, in a separate process.

score.py generates the inputs, checks the outputs and keeps the clock; this process only
imports the solution and calls it. score.py starts this file's source with `python -c` under
the helper's confinement and talks to it over two pipes (one JSON line per message) and two
shared-memory buffers (memfds) that hold one call's input and output as int32.

    python -c SOURCE READ_FD WRITE_FD SOLUTION_DIR DEVICE THREADS INPUT_FD OUTPUT_FD CAPACITY

(started by the environment kit's ConfinedChild, rebench/kit/confined.py)

The solution's code runs in this interpreter and can change anything in it, this loop
included, so nothing here is trusted: score.py writes each input only after its clock has
started, charges the CPU time of this process and of every process it starts, and checks
every answer itself. The one guard set up here, before the solution is imported, is enforced
by the kernel and cannot be undone: no process of the solution may change how SIGCHLD is
handled, because a parent that ignores SIGCHLD has its children reaped without their CPU
time being added to anyone's (see score.py).

Before the solution is imported the loop runs a do-nothing prefix_sum (it returns its input):
score.py times a few calls of it along the same path as the solution's, which measures what
the harness itself adds to each timed call (pipes, buffers, copies), untouched by the agent's
code, and reports it beside the score. {"import": true} then imports the solution.

Out, first: {"started": true, "sigchld_guard": "..."} once PyTorch is imported; after
{"import": true}: {"ready": true} or {"error": "..."}.

In: {"import": true}  import solution.py; from then on its prefix_sum is called
    {"run": n}    (CPU) the input is in the input buffer: call prefix_sum on it, check the
                  result's type, shape and dtype, copy it to the output buffer and reply
                  {"ok": true}, {"problem": "..."} or {"error": "..."}
    {"load": n}   (CUDA) copy the input buffer to the device; reply {"loaded": n}
    {"go": true}  (CUDA) call prefix_sum on it; reply {"done": true} as soon as it returns
    {"fetch": true}  (CUDA) check the result and copy it to the output buffer, as "run" does
(the CUDA messages work on the CPU too, so that their path is tested without a GPU)
    ""            exit
"""

import ctypes
import mmap
import os
import platform
import signal
import struct
import sys

from rebench.kit.confined import Channel, import_file

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
# (audit arch, rt_sigaction's number) for the architectures the images are built for
_ARCHES = {"x86_64": (0xC000003E, 13), "aarch64": (0xB7 | 0xC0000000, 134)}


def _sigchld_guard_program(machine):
    """A seccomp filter that fails rt_sigaction(SIGCHLD, new action) with EPERM and every
    system call of another ABI (32-bit, x32) with ENOSYS; it allows everything else."""
    arch, rt_sigaction = _ARCHES[machine]
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06

    def op(code, k, jt=0, jf=0):
        return struct.pack("HBBI", code, jt, jf, k)

    return b"".join([
        op(load, 4),                            # 0: arch
        op(jeq, arch, 1, 0),                    # 1
        op(ret, enosys),                        # 2: another ABI
        op(load, 0),                            # 3: system call number
        op(jge, 0x40000000, 0, 1),              # 4: x32 numbers (x86-64)
        op(ret, enosys),                        # 5
        op(jeq, rt_sigaction, 0, 6),            # 6: not rt_sigaction: allow (13)
        op(load, 16),                           # 7: signal number (low half of args[0])
        op(jeq, signal.SIGCHLD, 0, 4),          # 8: another signal: allow
        op(load, 24),                           # 9: new action pointer, low half
        op(jeq, 0, 0, 3),                       # 10: set: deny (14)
        op(load, 28),                           # 11: high half
        op(jeq, 0, 0, 1),                       # 12: set: deny
        op(ret, allow),                         # 13
        op(ret, eperm),                         # 14
    ])


def guard_sigchld():
    """Install the SIGCHLD guard for this process and all it starts; 'active' or why not."""
    machine = platform.machine()
    if machine not in _ARCHES:
        return f"unavailable: no filter for {machine}"
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    program = _sigchld_guard_program(machine)
    filters = ctypes.create_string_buffer(program, len(program))

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    fprog = Program(len(program) // 8, ctypes.addressof(filters))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"unavailable: no_new_privs: {os.strerror(ctypes.get_errno())}"
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return f"unavailable: seccomp: {os.strerror(ctypes.get_errno())}"
    return "active"


def _do_nothing(x):
    """The stand-in solution timed before the real one is imported: the harness's share of a call."""
    return x


def main():
    channel = Channel(sys.argv)
    solution, device, threads, input_fd, output_fd, capacity = channel.args
    send = channel.send
    capacity = int(capacity)
    input_buffer = mmap.mmap(int(input_fd), capacity * 4)
    output_buffer = mmap.mmap(int(output_fd), capacity * 4)
    guard = guard_sigchld()

    import torch

    cuda = device.startswith("cuda")
    send({"started": True, "sigchld_guard": guard})
    prefix_sum = _do_nothing
    imported = False

    def call(x):
        """prefix_sum(x), or the error message it raised."""
        try:
            if int(threads) > 0:
                torch.set_num_threads(int(threads))
            result = prefix_sum(x)
            if cuda:
                torch.cuda.synchronize()
        except Exception as exc:
            return None, f"{type(exc).__name__}: {exc}"[:1000]
        return result, None

    def deliver(result, x, n):
        """Check the result's type, shape, dtype and device and copy it to the output buffer."""
        if type(result) is not torch.Tensor:
            return {"problem": f"prefix_sum returned {type(result).__name__}, expected a torch.Tensor"}
        for field, expected in (("shape", (n,)), ("dtype", torch.int32), ("device", x.device)):
            if getattr(result, field) != expected:
                return {"problem": f"wrong {field}: got {getattr(result, field)}, expected {expected}"}
        torch.frombuffer(output_buffer, dtype=torch.int32, count=n).copy_(result.cpu())
        return {"ok": True}

    x = result = None
    n = 0
    while (message := channel.receive()) is not None:
        if "import" in message and not imported:
            imported = True
            try:
                prefix_sum = import_file(solution, "solution.py", "solution").prefix_sum
            except Exception as exc:
                send({"error": f"{type(exc).__name__}: {exc}"[:1000]})
                return
            send({"ready": True})
        elif "run" in message:
            n = int(message["run"])
            x = torch.frombuffer(input_buffer, dtype=torch.int32, count=n)  # no copy
            result, error = call(x)
            send({"error": error} if error else deliver(result, x, n))
            x = result = None
        elif "load" in message:
            n = int(message["load"])
            x = torch.frombuffer(input_buffer, dtype=torch.int32, count=n).to(device)
            if cuda:
                torch.cuda.synchronize()
            else:  # a copy, as on the device: the buffer changes before the call (tests use this)
                x = x.clone()
            send({"loaded": n})
        elif "go" in message:
            result, error = call(x)
            send({"error": error} if error else {"done": True})
        elif "fetch" in message:
            send(deliver(result, x, n))
            result = None


if __name__ == "__main__":
    main()
    # Skip the interpreter's teardown (PyTorch's and LLVM's take up to a second): the scorer
    # waits for this exit, and nothing is left to save but what was printed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
