"""Train the reference convolutional MLM: writes conv_model.pt and conv_model.json here.

The depth grows during training (RE-Bench's reference grew from 2 to 5 layers): new
blocks start as the identity (zeroed output projection), so the net keeps what it knew.
The plan (sizes, steps per stage, learning rate) is in reference_plan.json, per profile.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
HOME = Path(os.environ.get("REBENCH_HOME") or HERE.parent)
sys.path.insert(0, str(HERE))

from mlm_data import MaskedBatches, masked_loss  # noqa: E402
from model import ConvBlock, build_model  # noqa: E402


def main() -> None:
    task = json.loads((HOME / "profile_params.json").read_text(encoding="utf-8"))
    plan = json.loads((HERE / "reference_plan.json").read_text(encoding="utf-8"))[task["profile"]]
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("REFERENCE_THREADS", "1")))
    device = "cuda" if torch.cuda.is_available() and str(task.get("device", "cpu")).startswith("cuda") else "cpu"
    config = {"vocab_size": task["vocab_size"], "width": plan["width"], "layers": plan["stages"][0]["layers"],
              "kernel": plan["kernel"], "hidden": plan["hidden"], "residual_scale": plan["residual_scale"]}
    model = build_model(config).to(device)
    batches = MaskedBatches(HOME / "data" / "train.bin", task["seq_len"], plan["batch_size"], task["mask_prob"],
                            task["mask_id"], seed=1)
    started = time.time()
    total_steps = sum(stage["steps"] for stage in plan["stages"])
    step = 0
    for stage in plan["stages"]:
        while len(model.blocks) < stage["layers"]:
            block = ConvBlock(plan["width"], plan["kernel"], plan["hidden"], plan["residual_scale"]).to(device)
            torch.nn.init.zeros_(block.proj.weight)
            torch.nn.init.zeros_(block.proj.bias)
            model.blocks.append(block)
        optimizer = torch.optim.AdamW(model.parameters(), lr=plan["lr"], weight_decay=0.01)
        for _ in range(stage["steps"]):
            lr = plan["lr"] * max(0.1, 1 - step / total_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            inputs, targets, mask = (t.to(device) for t in batches.next())
            loss = masked_loss(model(inputs), targets, mask)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step += 1
            if step % 100 == 0:
                print(f"step {step} layers {len(model.blocks)}: loss {float(loss.detach()):.3f} "
                      f"grad norm {float(grad_norm):.2f} ({time.time() - started:.0f}s)", flush=True)
    config["layers"] = len(model.blocks)
    torch.save(model.cpu().state_dict(), HERE / "conv_model.pt")
    (HERE / "conv_model.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    print(f"saved conv_model.pt ({config['layers']} layers, {time.time() - started:.0f}s)")


if __name__ == "__main__":
    main()
