"""Reference plan: a layerwise rotation (LaRoSA) followed by per-token top-k.

Each sparsified layer's input is rotated by the eigenvectors of its calibration inputs'
second-moment matrix (uncentred PCA), so most of its energy lies in few coordinates and top-k
in the rotated basis discards less of it than top-k in the original one.
"""

import sparse_gpt
import torch


def make_plan(model, calibration, target):
    # 128 sequences (8192 tokens) estimate every width's second moments well enough
    inputs = sparse_gpt.collect_inputs(model, calibration[:128], model.config.n_layer)
    plan = {}
    for site, x in inputs.items():
        d = x.shape[1]
        x = x.double()
        _, vectors = torch.linalg.eigh(x.T @ x / len(x))
        keep = int((1 - target) * d)  # rounded down: at least the target
        plan[site] = {"transform": vectors.float(), "keep": torch.tensor([keep])}
    return plan
