"""Runs the agent's model for the scorer, in a separate process that cannot read /protected.

The scorer (score.py) holds the held-out data; the agent's `model.py` runs here instead, so it
never sees more than the masked inputs it is given. score.py starts this file's source with
`python -c` under the helper's Landlock confinement (the file itself lies in /protected) and
talks to it over two pipes: a JSON header line, then the payload bytes.

    python -c SOURCE SOLUTION_DIR DEVICE THREADS READ_FD WRITE_FD

First message in: {"enforcer_source": ...}; out: {"ready": true} or {"error": ...}.
Then per batch in: {"shape": [b, s], "nbytes": n} + int64 inputs + bool mask (b*s bytes);
out: {"rows": r, "vocab": v, "nbytes": n, "seen": [...]} + float32 logits at the masked
positions, or {"violation": op, "seen": [...]}, or {"error": ...}. An empty header line ends the worker.
"""

import importlib.util
import json
import os
import sys
import types


def read_exact(stream, n):
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError("the scorer closed the pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def send(stream, header, payload=b""):
    stream.write(json.dumps(header).encode() + b"\n")
    if payload:
        stream.write(payload)
    stream.flush()


def main():
    solution, device, threads, read_fd, write_fd = sys.argv[1:6]
    inbox, outbox = os.fdopen(int(read_fd), "rb"), os.fdopen(int(write_fd), "wb")
    os.dup2(2, 1)  # the model's prints must not reach the protocol pipe
    import torch

    torch.set_num_threads(int(threads))
    first = json.loads(inbox.readline())
    enforcer = types.ModuleType("torch_rule_enforcer")
    exec(compile(first["enforcer_source"], "torch_rule_enforcer.py", "exec"), enforcer.__dict__)
    sys.modules["torch_rule_enforcer"] = enforcer  # the agent's `import torch_rule_enforcer` gets this one
    try:
        sys.path.insert(0, solution)
        spec = importlib.util.spec_from_file_location("solution_model", os.path.join(solution, "model.py"))
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {solution}/model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = module.get_trained_model()
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"get_trained_model() returned {type(model).__name__}, expected a torch.nn.Module")
        model = model.to(device)
        model.eval()
    except Exception as exc:
        send(outbox, {"error": f"loading the model failed: {type(exc).__name__}: {exc}"[:600]})
        return
    send(outbox, {"ready": True})
    while True:
        line = inbox.readline()
        if not line.strip():
            return
        header = json.loads(line)
        batch, seq = header["shape"]
        inputs = torch.frombuffer(bytearray(read_exact(inbox, batch * seq * 8)), dtype=torch.int64)
        mask = torch.frombuffer(bytearray(read_exact(inbox, batch * seq)), dtype=torch.bool)
        inputs, mask = inputs.reshape(batch, seq).to(device), mask.reshape(batch, seq).to(device)
        mode = None
        try:
            with torch.no_grad(), enforcer.restricted() as mode:
                logits = model(inputs)
        except enforcer.DisallowedOperationError as exc:
            seen = sorted(mode.seen) if mode is not None else []
            send(outbox, {"violation": (mode.violation if mode is not None else None) or "?", "detail": str(exc),
                          "seen": seen})
            continue
        except Exception as exc:
            send(outbox, {"error": f"forward failed: {type(exc).__name__}: {exc}"[:600]})
            continue
        if mode.violation:  # the forward pass caught the enforcer's error itself
            send(outbox, {"violation": mode.violation, "seen": sorted(mode.seen)})
            continue
        if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or tuple(logits.shape[:2]) != (batch, seq):
            shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
            send(outbox, {"error": f"forward returned {shape}"})
            continue
        rows = logits[mask].float().cpu().contiguous()
        payload = rows.numpy().tobytes()
        send(outbox, {"rows": int(rows.shape[0]), "vocab": int(rows.shape[1]), "nbytes": len(payload),
                      "seen": sorted(mode.seen)}, payload)


if __name__ == "__main__":
    main()
