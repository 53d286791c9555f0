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

import mmap
import os
import sys

from rebench.kit.confined import Channel, import_file
from rebench.kit.proctree import guard_sigchld


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
    # this thread runs every call: the scorer reads how long it waited for a CPU (not yet the solution's code)
    send({"started": True, "sigchld_guard": guard, "pid": os.getpid()})
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
