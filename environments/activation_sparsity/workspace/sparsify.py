"""The sparsity plan (starting solution): per-token magnitude top-k at every sparsified layer.

The scorer calls make_plan(model, calibration, target) in a separate process, with `model` the
dense GPT (model.py) and `calibration` the calibration text as a LongTensor (sequences x
positions), and applies the returned plan as sparse_gpt.py describes.
"""

import sparse_gpt
import torch


def make_plan(model, calibration, target):
    plan = {}
    for site in sparse_gpt.sites(model.config.n_layer):
        d = sparse_gpt.module_at(model, site).in_features
        keep = int((1 - target) * d)  # rounded down: at least the target
        plan[site] = {"transform": torch.eye(d), "keep": torch.tensor([keep])}
    return plan
