"""Runs the agent's sparsify.py for the scorer, in a confined process, and sends its plan back.

score.py starts this file's source with `python -c` under the scoring helper's confinement (the
file itself lies in /protected); this process cannot read the held-out text. It

1. loads the dense GPT and the calibration text from the agent's home;
2. imports sparsify.py from the solution folder and calls
   `make_plan(model, calibration, target_sparsity)`;
3. sends the plan back as JSON (site, key, dtype, shape of each tensor) followed by the tensors'
   raw bytes, and exits.

Nothing is pickled: the scorer decodes only JSON and bytes, applies the plan to its own copy of
the model (scoring/sparse_gpt.py) and measures everything itself.

    python -c SOURCE READ_FD WRITE_FD SOLUTION_DIR THREADS

In: {"sparse_source", "model", "config", "calibration", "block_size", "target"}.
Out: {"tensors": [...], "nbytes": n} + bytes, or {"error": ...}.
"""

import os
import sys
import types

from rebench.kit.confined import Channel, import_file

DTYPES = ("float32", "float64", "int64", "int32")


def compute_plan(solution, request):
    import numpy as np
    import torch

    from rebench.kit.gpt import GPT, GPTConfig

    # The agent's `import sparse_gpt` gets the scorer's copy of the rules.
    sparse = types.ModuleType("sparse_gpt")
    exec(compile(request["sparse_source"], "sparse_gpt.py", "exec"), sparse.__dict__)
    sys.modules["sparse_gpt"] = sparse
    state = torch.load(request["model"], map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**request["config"]))
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    model.eval()
    block = int(request["block_size"])
    tokens = np.fromfile(request["calibration"], dtype=np.uint16).astype(np.int64)
    calibration = torch.from_numpy(tokens[:len(tokens) // block * block].reshape(-1, block))
    module = import_file(solution, "sparsify.py", "solution_sparsify")
    with torch.no_grad():
        plan = module.make_plan(model, calibration, float(request["target"]))
    if not isinstance(plan, dict):
        raise TypeError(f"make_plan returned {type(plan).__name__}, expected a dict of site -> dict of tensors")
    specs, chunks = [], []
    for site, entry in plan.items():
        if not isinstance(site, str) or not isinstance(entry, dict):
            raise TypeError("the plan maps site names to dicts of tensors")
        for key, value in entry.items():
            if not isinstance(key, str) or not isinstance(value, torch.Tensor):
                raise TypeError(f"{site}: every entry value must be a tensor")
            tensor = value.detach().to("cpu").contiguous()
            dtype = str(tensor.dtype).removeprefix("torch.")
            if dtype not in DTYPES:
                raise TypeError(f"{site}.{key}: dtype {dtype} is not one of {', '.join(DTYPES)}")
            data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
            specs.append({"site": site, "key": key, "dtype": dtype, "shape": list(tensor.shape), "nbytes": len(data)})
            chunks.append(data)
    payload = b"".join(chunks)
    return {"tensors": specs, "nbytes": len(payload)}, payload


def main():
    channel = Channel(sys.argv)
    solution, threads = channel.args
    import torch

    torch.set_num_threads(int(threads))
    request = channel.receive() or {}
    try:
        header, payload = compute_plan(solution, request)
    except Exception as exc:
        channel.send({"error": f"make_plan failed: {type(exc).__name__}: {exc}"[:600]})
        return
    channel.send(header, payload)


if __name__ == "__main__":
    main()
    # Skip the interpreter's teardown (PyTorch's can take seconds on a busy machine): the scorer
    # waits for this exit, and a child of another user that outlives the wait cannot be killed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
