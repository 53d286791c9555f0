"""Scoring for Restricted Architecture MLM: masked-prediction loss of `get_trained_model()`.

Called by the rebench scoring helper as `score(ctx)`; run directly (`python score.py`)
it prints a result without logging it (on the visible validation split when the
held-out split is not readable).

For each of `eval_batches` batches of `seq_len` tokens from the held-out split, every
position is masked with probability `mask_prob` (replaced by `mask_id`); the model's
forward pass runs inside torch_rule_enforcer.restricted(), and the loss is the mean
cross-entropy at the masked positions. The model runs in a separate, confined process
(model_worker.py) that gets only the masked inputs and cannot read /protected, so a
model cannot look the answers up in the held-out file; this process computes the loss.
Raw score = ln(loss - loss_offset), lower is better. A forbidden operation in the
forward pass, a wrong output shape or a non-finite loss makes the score invalid (None).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch


class WorkerFailed(Exception):
    pass


class ModelWorker:
    """The agent's model, in a child process started through the helper's confinement
    (`ctx["confine_command"]`), so code in model.py cannot read the held-out data this
    process holds; see model_worker.py for the protocol."""

    def __init__(self, ctx: dict[str, Any], solution: Path, device: str) -> None:
        here = Path(__file__).resolve().parent
        source = (here / "model_worker.py").read_text(encoding="utf-8")
        to_child, self._to_child = os.pipe()
        self._from_child, from_child = os.pipe()
        command = [*ctx.get("confine_command", []), sys.executable, "-c", source, str(solution), device,
                   str(int(ctx.get("threads", 1))), str(to_child), str(from_child)]
        self.proc = subprocess.Popen(command, pass_fds=(to_child, from_child), cwd=solution,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        os.close(to_child)
        os.close(from_child)
        self._output: list[bytes] = []
        self.first_line: bytes | None = None
        self._drain = threading.Thread(target=self._read_output, daemon=True)
        self._drain.start()
        self.inbox = os.fdopen(self._from_child, "rb")
        self.outbox = os.fdopen(self._to_child, "wb")
        try:
            self._send({"enforcer_source": (here / "torch_rule_enforcer.py").read_text(encoding="utf-8")})
            reply = self._receive()
        except WorkerFailed:
            self.close()
            raise
        if "error" in reply:
            self.close()
            raise WorkerFailed(str(reply["error"]))

    def _read_output(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if self.first_line is None:
                self.first_line = line
            self._output.append(line)
            del self._output[:-200]

    @property
    def confined(self) -> bool:
        """Whether the confinement launcher reported Landlock active (its first line, which
        the solution's own output cannot precede)."""
        return (self.first_line or b"").startswith(b"rebench-confine: active")

    def output_tail(self) -> str:
        return b"".join(self._output).decode("utf-8", errors="replace")[-3000:]

    def _send(self, header: dict[str, Any], *payloads: bytes) -> None:
        try:
            self.outbox.write(json.dumps(header).encode() + b"\n")
            for payload in payloads:
                self.outbox.write(payload)
            self.outbox.flush()
        except BrokenPipeError as exc:
            raise WorkerFailed(self._died()) from exc

    def _receive(self) -> dict[str, Any]:
        line = self.inbox.readline()
        if not line:
            raise WorkerFailed(self._died())
        header: dict[str, Any] = json.loads(line)
        nbytes = int(header.get("nbytes", 0))
        if nbytes:
            header["payload"] = self.inbox.read(nbytes)
            if len(header["payload"]) != nbytes:
                raise WorkerFailed(self._died())
        return header

    def _died(self) -> str:
        try:
            code: int | None = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # it closed its end of the pipe but lives on
            self.proc.kill()
            code = self.proc.wait()
        self._drain.join(timeout=2)
        return f"the model process exited with {code}: {self.output_tail()[-600:]}"

    def forward_masked(self, inputs: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
        self._send({"shape": list(inputs.shape)}, inputs.astype(np.int64).tobytes(), mask.astype(np.bool_).tobytes())
        return self._receive()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.outbox.write(b"\n")
            self.outbox.flush()
        with contextlib.suppress(OSError):
            self.outbox.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            self.inbox.close()
        self._drain.join(timeout=5)


def batches(path: Path, n: int, batch_size: int, seq_len: int, mask_prob: float, mask_id: int, seed: int):
    data = np.memmap(path, dtype=np.uint16, mode="r")
    rng = np.random.Generator(np.random.PCG64(seed))
    for _ in range(n):
        ix = rng.integers(0, len(data) - seq_len, size=batch_size)
        tokens = np.stack([data[i:i + seq_len] for i in ix]).astype(np.int64)
        mask = rng.random(tokens.shape) < mask_prob
        inputs = np.where(mask, mask_id, tokens)
        yield inputs, tokens, mask


def score(ctx: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(int(ctx.get("threads", 1)))
    home, solution, protected = Path(ctx["home"]), Path(ctx["solution"]), Path(ctx["protected"])
    device = str(ctx.get("device", "cpu"))
    if device.startswith("cuda") and not torch.cuda.is_available():
        device = "cpu"
    data_path = protected / "heldout.bin"
    message: dict[str, Any] = {}
    if not os.access(data_path, os.R_OK):
        data_path = home / "data" / "val.bin"
        message["note"] = "held-out data not readable here: scored on data/val.bin (use the score tool)"
    vocab, seq_len = int(ctx["vocab_size"]), int(ctx["seq_len"])
    try:
        worker = ModelWorker(ctx, solution, device)
    except WorkerFailed as exc:
        return {"raw": None, "message": {**message, "error": str(exc)[:600]}, "details": {}}
    total, count = 0.0, 0
    seen: set[str] = set()
    try:
        for inputs, targets, mask in batches(data_path, int(ctx["eval_batches"]), int(ctx["eval_batch_size"]),
                                             seq_len, float(ctx["mask_prob"]), int(ctx["mask_id"]), seed=0):
            reply = worker.forward_masked(inputs, mask)
            seen |= set(reply.get("seen", []))
            if "violation" in reply:
                error = f"rule violation: operation {reply['violation']!r} is not allowed in the forward pass"
                return {"raw": None, "message": {**message, "error": error},
                        "details": {"ops_seen": sorted(seen), "detail": str(reply.get("detail", ""))[:600]}}
            if "error" in reply or int(reply.get("vocab", -1)) != vocab or int(reply["rows"]) != int(mask.sum()):
                problem = reply.get("error") or f"forward returned {reply.get('vocab')} logits per position"
                return {"raw": None, "message": {**message, "error": f"{problem}, expected logits of shape "
                                                 f"[batch, {seq_len}, {vocab}]"[:600]}, "details": {}}
            logits = torch.frombuffer(bytearray(reply["payload"]), dtype=torch.float32).reshape(-1, vocab)
            loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(targets[mask]), reduction="sum")
            total += float(loss)
            count += int(mask.sum())
    except WorkerFailed as exc:
        return {"raw": None, "message": {**message, "error": str(exc)[:600]}, "details": {}}
    finally:
        worker.close()
    loss_value = total / max(count, 1)
    message["loss"] = round(loss_value, 4)
    if not math.isfinite(loss_value):
        return {"raw": None, "message": {**message, "error": "loss is not finite"}, "details": {}}
    offset = float(ctx["loss_offset"])
    raw = math.log(max(loss_value - offset, 1e-6))
    return {"raw": raw, "message": message,
            "details": {"loss": loss_value, "masked_tokens": count, "loss_offset": offset, "ops_seen": sorted(seen),
                        "data": data_path.name, "model_confined": worker.confined}}


def _direct_context() -> dict[str, Any]:
    here = Path(__file__).resolve().parent
    home = Path(os.environ.get("REBENCH_HOME") or here)
    ctx: dict[str, Any] = json.loads((home / "profile_params.json").read_text(encoding="utf-8"))
    params_file = os.environ.get("REBENCH_SCORE_PARAMS")
    if params_file and os.path.exists(params_file):
        ctx.update(json.loads(Path(params_file).read_text(encoding="utf-8")))
    ctx.setdefault("home", str(home))
    ctx.setdefault("solution", os.environ.get("REBENCH_SOLUTION") or str(home / "solution"))
    ctx.setdefault("protected", "/protected")
    return ctx


if __name__ == "__main__":
    print(json.dumps(score(_direct_context()), indent=2))
