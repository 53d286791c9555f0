"""Training from finetune.yaml, as LLM Foundry's train script does it with Composer: the model from
a Hugging Face folder, a shuffled train loader, AdamW with a warmed-up cosine schedule, gradient
clipping, micro-batches, evaluation on the eval loader, and a checkpoint of the whole training
state (model, optimizer, scheduler) at the end of each interval."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

from minifoundry.data import IGNORE, ShardDataset


def steps_of(duration: str, batches_per_epoch: int) -> int:
    """'2ep' or '100ba' as a number of batches."""
    if duration.endswith("ep"):
        return int(duration[:-2]) * batches_per_epoch
    if duration.endswith("ba"):
        return int(duration[:-2])
    raise SystemExit(f"bad duration {duration!r}: use NNep or NNba")


def build_loader(spec: dict[str, Any], data_local: str, batch_size: int, seed: int) -> DataLoader:
    dataset_spec = spec["dataset"]
    dataset = ShardDataset(Path(data_local) / dataset_spec["split"])
    if dataset_spec.get("shuffle", False):
        sampler: torch.utils.data.Sampler = RandomSampler(
            dataset, generator=torch.Generator().manual_seed(int(dataset_spec.get("shuffle_seed", seed))))
    else:
        sampler = SequentialSampler(dataset)
    workers = int(spec.get("num_workers", 0))
    persistent = bool(spec.get("persistent_workers", False)) and workers > 0
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=bool(spec.get("drop_last", False)),
                      num_workers=workers, persistent_workers=persistent,
                      multiprocessing_context=spec.get("multiprocessing_context") if workers > 0 else None,
                      prefetch_factor=spec.get("prefetch_factor") if workers > 0 else None)


def token_losses(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """Sum of next-token cross-entropies over the trained positions, and their number."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    labels = batch["labels"][:, 1:]
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(), labels.reshape(-1),
                           ignore_index=IGNORE, reduction="sum")
    return loss, int((labels != IGNORE).sum())


def schedule(spec: dict[str, Any], total: int) -> Any:
    warmup = steps_of(str(spec.get("t_warmup", "0ba")), total)
    alpha_f = float(spec.get("alpha_f", 0.0))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return alpha_f + (1 - alpha_f) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def evaluate(model: torch.nn.Module, loader: DataLoader) -> float:
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in loader:
            loss, n = token_losses(model, batch)
            total += float(loss)
            count += n
    model.train()
    return total / max(count, 1)


def save_checkpoint(folder: str, name: str, state: dict[str, Any], keep: int) -> None:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    torch.save(state, path)
    latest = os.path.join(folder, "latest-rank0.pt")
    if os.path.lexists(latest):
        os.remove(latest)
    os.symlink(name, latest)
    if keep > 0:
        saved = sorted((p for p in Path(folder).glob("ep*-rank0.pt")), key=os.path.getmtime)
        for old in saved[:-keep]:
            old.unlink()


def train(config: dict[str, Any]) -> torch.nn.Module:
    """Train as `config` says; returns the trained model."""
    from transformers import AutoModelForCausalLM

    seed = int(config.get("seed", 17))
    torch.manual_seed(seed)
    model_name = config["model"]["pretrained_model_name_or_path"]
    model = AutoModelForCausalLM.from_pretrained(model_name, dtype=torch.float32)
    model.train()
    batch_size = int(config["global_train_batch_size"])
    micro = int(config.get("device_train_microbatch_size", batch_size))
    train_loader = build_loader(config["train_loader"], config["data_local"], batch_size, seed)
    eval_spec = config.get("eval_loader")
    eval_loader = (build_loader(eval_spec, config["data_local"], int(config.get("device_eval_batch_size", micro)),
                                seed) if eval_spec else None)
    per_epoch = len(train_loader)
    total = steps_of(str(config["max_duration"]), per_epoch)
    opt = config["optimizer"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(opt["lr"]), betas=tuple(opt.get("betas", (0.9, 0.95))),
                                  eps=float(opt.get("eps", 1e-8)), weight_decay=float(opt.get("weight_decay", 0.0)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(config.get("scheduler", {}), total))
    clip = float(config.get("algorithms", {}).get("gradient_clipping", {}).get("clipping_threshold", 0) or 0)
    eval_every = steps_of(str(config.get("eval_interval", "0ba")), per_epoch) if eval_loader is not None else 0
    save_every = steps_of(str(config.get("save_interval", "1ep")), per_epoch)
    log_every = steps_of(str(config.get("console_log_interval", "1ba")), per_epoch)
    save_folder = config.get("save_folder")
    started, step = time.time(), 0
    while step < total:
        for batch in train_loader:
            if step >= total:
                break
            optimizer.zero_grad(set_to_none=True)
            trained = int((batch["labels"][:, 1:] != IGNORE).sum())
            running = 0.0
            for start in range(0, batch["input_ids"].size(0), micro):
                part = {key: value[start:start + micro] for key, value in batch.items()}
                loss, _ = token_losses(model, part)
                (loss / trained).backward()
                running += float(loss.detach())
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            scheduler.step()
            step += 1
            if log_every and step % log_every == 0:
                print(f"[batch={step}/{total}] train/loss: {running / trained:.4f} "
                      f"lr: {scheduler.get_last_lr()[0]:.3e} ({time.time() - started:.1f}s)", flush=True)
            if eval_every and step % eval_every == 0:
                print(f"[batch={step}/{total}] eval/loss: {evaluate(model, eval_loader):.4f}", flush=True)
            if save_folder and save_every and (step % save_every == 0 or step == total):
                state = {"state": {"model": model.state_dict(), "optimizers": {"AdamW": optimizer.state_dict()},
                                   "schedulers": [scheduler.state_dict()], "timestamp": {"batch": step}},
                         "rng": {"torch": torch.get_rng_state()},
                         "integrations": {"model_name_or_path": model_name}}
                save_checkpoint(save_folder, f"ep{step // per_epoch}-ba{step}-rank0.pt", state,
                                int(config.get("save_num_checkpoints_to_keep", -1)))
    return model
