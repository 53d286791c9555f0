"""Builds the agent's model for the scorer and hands it over as a graph, in a confined process.

The scorer (score.py) holds the held-out data and the rules; the agent's `model.py` runs only
here. score.py starts this file's source with `python -c` under the helper's Landlock
confinement (the file itself lies in /protected), and this process:

1. imports model.py and calls `get_trained_model()`;
2. exports the model's forward pass with `torch.export` for inputs of the scored shape
   (static shapes) and decomposes it to core ATen operators;
3. sends the graph back as plain JSON (each node: an ATen operator's name and its
   arguments) followed by the raw bytes of its weights, and exits.

The scorer checks every operator of that graph against the allow-list and runs the graph
itself, so nothing model.py does in this process (patching an enforcer, say) reaches the
check or the scored forward passes. Nothing is pickled: the scorer decodes only JSON and
tensor bytes.

    python -c SOURCE READ_FD WRITE_FD SOLUTION_DIR DEVICE THREADS

(started by the environment kit's ConfinedChild, rebench/kit/confined.py)

In: {"enforcer_source": ..., "shape": [batch, seq_len]}. Out: {"graph": ..., "tensors": [...],
"nbytes": n} + the tensors' bytes, or {"error": ...}.
"""

import operator
import sys
import types

from rebench.kit.confined import Channel, import_file


def load_model(solution, device, enforcer_source):
    import torch

    # The agent's `import torch_rule_enforcer` gets the read-only copy (for its own checks;
    # the scored check does not run here).
    enforcer = types.ModuleType("torch_rule_enforcer")
    exec(compile(enforcer_source, "torch_rule_enforcer.py", "exec"), enforcer.__dict__)
    sys.modules["torch_rule_enforcer"] = enforcer
    model = import_file(solution, "model.py", "solution_model").get_trained_model()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"get_trained_model() returned {type(model).__name__}, expected a torch.nn.Module")
    return model.to(device).eval()


def encode(value, index):
    """One argument of a graph node as JSON: nodes by index, torch enums by name."""
    import torch

    if isinstance(value, torch.fx.Node):
        return {"node": index[value]}
    if isinstance(value, (list, tuple)):
        return {"list": [encode(item, index) for item in value]}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": value.type}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a graph argument of type {type(value).__name__} cannot be scored")


def export_graph(model, shape, device):
    """(header, payload): the decomposed forward graph and its tensors' bytes."""
    import torch
    from torch.export.graph_signature import InputKind, OutputKind

    example = torch.zeros(shape, dtype=torch.long, device=device)
    with torch.no_grad():
        program = torch.export.export(model, (example,)).run_decompositions()
    outputs = program.graph_signature.output_specs
    if [spec.kind for spec in outputs] != [OutputKind.USER_OUTPUT]:
        raise ValueError("forward must return one tensor of logits and change no buffers or inputs")
    placeholders = iter(program.graph_signature.input_specs)
    nodes, tensors, chunks, index = [], [], [], {}
    for node in program.graph.nodes:
        index[node] = len(nodes)
        if node.op == "placeholder":
            spec = next(placeholders)
            if spec.kind == InputKind.USER_INPUT:
                nodes.append({"op": "input"})
                continue
            if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                raise TypeError(f"forward uses a {spec.kind.name.lower()}, which cannot be scored")
            source = program.state_dict if spec.target in program.state_dict else program.constants
            tensor = source[spec.target].detach().to("cpu").contiguous()
            data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
            nodes.append({"op": "tensor", "tensor": len(tensors)})
            tensors.append({"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape),
                            "nbytes": len(data)})
            chunks.append(data)
        elif node.op == "call_function":
            if node.target is operator.getitem:
                target = "getitem"
            elif isinstance(node.target, torch._ops.OpOverload):
                target = str(node.target)  # namespace.name.overload, e.g. aten.add.Tensor
            else:
                raise TypeError(f"forward calls {node.target}, which is not an ATen operator")
            nodes.append({"op": "call", "target": target, "args": encode(node.args, index),
                          "kwargs": {key: encode(value, index) for key, value in node.kwargs.items()}})
        elif node.op == "output":
            nodes.append({"op": "output", "args": encode(node.args[0], index)})
        else:
            raise TypeError(f"the exported graph has a {node.op} node, which cannot be scored")
    payload = b"".join(chunks)
    return {"graph": nodes, "tensors": tensors, "nbytes": len(payload)}, payload


def main():
    channel = Channel(sys.argv)
    solution, device, threads = channel.args
    import torch

    torch.set_num_threads(int(threads))
    first = channel.receive() or {}
    try:
        model = load_model(solution, device, first["enforcer_source"])
    except Exception as exc:
        channel.send({"error": f"loading the model failed: {type(exc).__name__}: {exc}"[:600]})
        return
    try:
        header, payload = export_graph(model, tuple(first["shape"]), device)
    except Exception as exc:
        channel.send({"error": f"exporting the model with torch.export failed: {type(exc).__name__}: {exc}"[:600]})
        return
    channel.send(header, payload)


if __name__ == "__main__":
    main()
