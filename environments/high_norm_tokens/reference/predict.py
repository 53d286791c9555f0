"""Reference: the paper's method, a linear approximation of each block and its singular vectors.

For the first token, attention attends only to the token itself, so each block acts on it as
x -> x + A(x) + M(x + A(x)), with A = W_O W_V diag(g_1) and, taking the MLP's activation as the
identity, M = W_out W_in diag(g_2) (LayerNorm's centring and scale left out: they change the
size, not the direction, of what a block writes). The leading singular value of A + M jumps at
the block that makes the norm explode; its left singular vector is the direction it writes (the
high-norm direction) and its right one the direction that triggers it. The block that ends the
defect has a large negative eigenvalue along that direction (it maps d to about -d).
"""

import torch


def block_map(blocks: dict[str, torch.Tensor], layer: int, n_embd: int) -> torch.Tensor:
    """A + M of block `layer` (0-based), an n_embd x n_embd matrix (inputs on the right)."""
    p = f"transformer.h.{layer}."
    w_v = blocks[p + "attn.c_attn.weight"][2 * n_embd:].double()
    attention = blocks[p + "attn.c_proj.weight"].double() @ w_v * blocks[p + "ln_1.weight"].double()
    mlp = blocks[p + "mlp.c_proj.weight"].double() @ blocks[p + "mlp.c_fc.weight"].double()
    return attention + mlp * blocks[p + "ln_2.weight"].double()


def predict(blocks: dict[str, torch.Tensor], config: dict) -> dict:
    n_layer, n_embd = config["n_layer"], config["n_embd"]
    tops = []
    for layer in range(n_layer):
        u, s, vh = torch.linalg.svd(block_map(blocks, layer, n_embd))
        tops.append((float(s[0]), u[:, 0], vh[0]))
    sigmas = torch.tensor([t[0] for t in tops])
    jump = sigmas > 5 * sigmas.median()
    # Explosion: the first jump whose output is not its own input reversed.
    explode = next((i for i in range(n_layer) if jump[i] and float(tops[i][1] @ tops[i][2]) > -0.5),
                   int(sigmas.argmax()))
    direction = tops[explode][1]
    # Decay: the first later block with a large negative eigenvalue along the direction (it maps
    # d to about -d); none found means the norm stays high (n_layer + 1).
    decay = next((i for i in range(explode + 1, n_layer)
                  if float(direction @ block_map(blocks, i, n_embd) @ direction) < -0.5 * float(sigmas[i])), n_layer)
    return {"explode_layer": explode + 1, "decay_layer": decay + 1, "direction": direction.tolist()}
