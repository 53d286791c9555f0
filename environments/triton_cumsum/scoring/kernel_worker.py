"""Runs the agent's `prefix_sum` for the scorer, in a separate process.

score.py generates the inputs, checks the outputs and keeps the clock; this process only
imports the solution and calls it, so a solution cannot patch the checker or the timer.
score.py starts this file's source with `python -c` under the helper's confinement and
talks to it over two pipes (one JSON line per message) and two shared-memory buffers
(memfds) that hold one call's input and output as int32.

    python -c SOURCE SOLUTION_DIR DEVICE THREADS READ_FD WRITE_FD INPUT_FD OUTPUT_FD CAPACITY

In: {"load": n}   the input is in the input buffer: make the call's input tensor (on DEVICE)
    {"go": true}  call prefix_sum on it; reply {"done": true} as soon as it returns
    {"fetch": true}  check the result's type, shape, dtype and device, copy it to the output
                     buffer, reply {"ok": true} or {"problem": "..."}
    ""            exit
"""

import importlib.util
import json
import mmap
import os
import sys


def main():
    solution, device, threads, read_fd, write_fd, input_fd, output_fd, capacity = sys.argv[1:9]
    inbox, outbox = os.fdopen(int(read_fd), "rb"), os.fdopen(int(write_fd), "wb")
    os.dup2(2, 1)  # the solution's prints must not reach the protocol pipe
    capacity = int(capacity)
    input_buffer = mmap.mmap(int(input_fd), capacity * 4)
    output_buffer = mmap.mmap(int(output_fd), capacity * 4)

    def send(message):
        outbox.write(json.dumps(message).encode() + b"\n")
        outbox.flush()

    import torch

    cuda = device.startswith("cuda")
    try:
        sys.path.insert(0, solution)
        spec = importlib.util.spec_from_file_location("solution", os.path.join(solution, "solution.py"))
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {solution}/solution.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        prefix_sum = module.prefix_sum
    except Exception as exc:
        send({"error": f"{type(exc).__name__}: {exc}"[:1000]})
        return
    send({"ready": True})
    x = result = None
    n = 0
    while True:
        line = inbox.readline()
        if not line.strip():
            return
        message = json.loads(line)
        if "load" in message:
            n = int(message["load"])
            host = torch.frombuffer(input_buffer, dtype=torch.int32, count=n)  # no copy: loading costs no CPU
            x = host.to(device) if cuda else host
            if cuda:
                torch.cuda.synchronize()
            send({"loaded": n})
        elif "go" in message:
            try:
                if int(threads) > 0:
                    torch.set_num_threads(int(threads))
                result = prefix_sum(x)
                if cuda:
                    torch.cuda.synchronize()
            except Exception as exc:
                send({"error": f"{type(exc).__name__}: {exc}"[:1000]})
                continue
            send({"done": True})
        elif "fetch" in message:
            if type(result) is not torch.Tensor:
                send({"problem": f"prefix_sum returned {type(result).__name__}, expected a torch.Tensor"})
                continue
            problem = None
            for field, expected in (("shape", (n,)), ("dtype", torch.int32), ("device", x.device)):
                if getattr(result, field) != expected:
                    problem = f"wrong {field}: got {getattr(result, field)}, expected {expected}"
                    break
            if problem:
                send({"problem": problem})
                continue
            torch.frombuffer(output_buffer, dtype=torch.int32, count=n).copy_(result.cpu())
            result = None
            send({"ok": True})


if __name__ == "__main__":
    main()
