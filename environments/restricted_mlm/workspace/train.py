"""Train the starting per-token MLP: `python train.py` writes basic_model.pt and basic_model.json.

Settings (RE-Bench's starter: 500 steps, batch 16, learning rate 1e-3) come from
the task's parameters in ../profile_params.json.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
HOME = Path(os.environ.get("REBENCH_HOME") or HERE.parent)
sys.path.insert(0, str(HERE))

from mlm_data import MaskedBatches, masked_loss  # noqa: E402
from model import build_model  # noqa: E402


def train_basic(params: dict, data_dir: Path, out_dir: Path, seed: int = 0) -> float:
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    config = {"vocab_size": params["vocab_size"], **params["basic_model"]}
    model = build_model(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    batches = MaskedBatches(data_dir / "train.bin", params["seq_len"], config["batch_size"], params["mask_prob"],
                            params["mask_id"], seed=seed)
    loss_value = float("nan")
    for _ in range(config["steps"]):
        inputs, targets, mask = batches.next()
        loss = masked_loss(model(inputs), targets, mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
    torch.save(model.state_dict(), out_dir / "basic_model.pt")
    (out_dir / "basic_model.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return loss_value


if __name__ == "__main__":
    task = json.loads((HOME / "profile_params.json").read_text(encoding="utf-8"))
    print("final training loss", train_basic(task, HOME / "data", HERE))
