"""Fix Embedding's `paper` build from operator assets: GPT-2 and GPT-2 XL checkpoints in the hub's
real format (`model.safetensors`, written here with the real `safetensors` library, keys without
the `transformer.` prefix, Conv1D matrices, causal-mask buffers) but small, and a prepared
OpenWebText folder of random tokens. Nothing here can download the real 6 GB files.

The paper image itself needs CUDA PyTorch and a GPU base image, which cannot be built here. The
Docker test therefore builds the paper profile of a copy of the environment whose only changes
are: `gpus = 0` (so the image is made from the CPU base), the tiny profile's requirements (CPU
PyTorch; the image's pip layer is then the tiny image's, cached, instead of minutes of installing;
the build step gets `safetensors` from the harness's environment), model configs that match the
small checkpoints, and the small files' sha256 in place of the real ones. The build step
(build.py --profile paper, with the harness's asset checks and staging) and the image recipe are
the real ones; the test then searches every file of the image for the unpermuted GPT-2 XL
embedding.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from .conftest import REPO, run_cli

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

VOCAB = 50257
SMALL = {"block_size": 32, "vocab_size": VOCAB, "n_layer": 2, "n_head": 2, "n_embd": 16, "bias": True}
LARGE = {"block_size": 32, "vocab_size": VOCAB, "n_layer": 3, "n_head": 2, "n_embd": 24, "bias": True}
NEEDLE_ROWS = 16  # this many consecutive rows of the original embedding never survive the permutation


def hub_gpt2_checkpoint(path: Path, config: dict, seed: int) -> dict[str, torch.Tensor]:
    """A GPT-2 `model.safetensors` as the hub ships it (saved from GPT2Model): `wte.weight`,
    `h.N.attn.c_attn.weight` as (in, out) Conv1D matrices, `h.N.attn.bias` mask buffers."""
    generator = torch.Generator().manual_seed(seed)
    c, block = config["n_embd"], config["block_size"]

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    state = {"wte.weight": rand(config["vocab_size"], c), "wpe.weight": rand(block, c),
             "ln_f.weight": rand(c), "ln_f.bias": rand(c)}
    for i in range(config["n_layer"]):
        state |= {
            f"h.{i}.ln_1.weight": rand(c), f"h.{i}.ln_1.bias": rand(c),
            f"h.{i}.attn.bias": torch.tril(torch.ones(block, block)).view(1, 1, block, block),
            f"h.{i}.attn.c_attn.weight": rand(c, 3 * c), f"h.{i}.attn.c_attn.bias": rand(3 * c),
            f"h.{i}.attn.c_proj.weight": rand(c, c), f"h.{i}.attn.c_proj.bias": rand(c),
            f"h.{i}.ln_2.weight": rand(c), f"h.{i}.ln_2.bias": rand(c),
            f"h.{i}.mlp.c_fc.weight": rand(c, 4 * c), f"h.{i}.mlp.c_fc.bias": rand(4 * c),
            f"h.{i}.mlp.c_proj.weight": rand(4 * c, c), f"h.{i}.mlp.c_proj.bias": rand(c),
        }
    safetensors_torch.save_file(state, str(path), metadata={"format": "pt"})
    return state


def _build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fix_embedding_build", REPO / "environments/fix_embedding/build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.torch
def test_hub_checkpoint_loads_into_the_kit_gpt(tmp_path: Path) -> None:
    """The converted state dict is the same network: the kit's GPT loads it strictly and its
    projections are the hub's Conv1D matrices transposed; a checkpoint of the wrong size is refused."""
    from rebench.kit.gpt import GPT, GPTConfig

    build = _build_module()
    hub = hub_gpt2_checkpoint(tmp_path / "model.safetensors", SMALL, seed=1)
    state = build.load_gpt2(tmp_path / "model.safetensors", SMALL, "GPT-2 small")
    assert torch.equal(state["transformer.h.1.mlp.c_fc.weight"], hub["h.1.mlp.c_fc.weight"].t())
    assert not any(key.endswith(".attn.bias") for key in state)  # mask buffers; c_attn.bias stays
    model = GPT(GPTConfig(**SMALL))
    model.load_state_dict({**state, "lm_head.weight": state["transformer.wte.weight"]}, strict=True)
    with pytest.raises(SystemExit, match="is not GPT-2 XL"):
        build.load_gpt2(tmp_path / "model.safetensors", LARGE, "GPT-2 XL")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _paper_copy(envs: Path, small: Path, large: Path) -> Path:
    """The environment with a CPU paper profile sized for the small checkpoints (see the docstring)."""
    folder = envs / "fix_embedding"
    shutil.copytree(REPO / "environments" / "fix_embedding", folder,
                    ignore=shutil.ignore_patterns("__pycache__", "tests", "requirements-paper.txt"))
    toml = folder / "environment.toml"
    text = toml.read_text()
    paper, tiny = text.split("[profiles.tiny]", 1)

    def inline(config: dict) -> str:
        fields = (f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in config.items())
        return "{ " + ", ".join(fields) + " }"

    paper = paper.replace("resources = { gpus = 1,", "resources = { gpus = 0,")
    paper = re.sub(r"^large_config = .*$", f"large_config = {inline(LARGE)}", paper, flags=re.M)
    paper = re.sub(r"^small_config = .*$", f"small_config = {inline(SMALL)}", paper, flags=re.M)
    paper = paper.replace("248dfc3911869ec493c76e65bf2fcf7f615828b0254c12b473182f0f81d3a707", _sha(small))
    paper = paper.replace("0f8b28eb05a8075f48b61b6f35332978c74fc7763fa9fb4051a1c30511736a6a", _sha(large))
    toml.write_text(paper + "[profiles.tiny]" + tiny)
    return folder


SCAN = r"""
import os, sys
needles = {name: bytes.fromhex(h) for name, h in (a.split("=") for a in sys.argv[1:])}
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys", "/dev"):
        dirs[:] = []
        continue
    for name in files:
        path = os.path.join(root, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            data = open(path, "rb").read()
        except OSError:
            continue
        for key, needle in needles.items():
            if needle in data:
                print(key, path)
"""


@pytest.mark.docker
@pytest.mark.slow
def test_paper_image_holds_no_unpermuted_gpt2_xl(tmp_path: Path, isolated_cache: Path) -> None:
    from .docker_support import base_image, docker_engine

    engine = docker_engine()
    base_image(engine)
    build = _build_module()
    inputs = tmp_path / "operator"
    inputs.mkdir()
    small, large = inputs / "gpt2.safetensors", inputs / "gpt2-xl.safetensors"
    hub_gpt2_checkpoint(small, SMALL, seed=1)
    original = hub_gpt2_checkpoint(large, LARGE, seed=2)["wte.weight"]
    owt = inputs / "owt"
    owt.mkdir()
    for name, count in (("train", 20_000), ("val", 4_000)):
        torch.randint(0, VOCAB, (count,), generator=torch.Generator().manual_seed(count)).to(
            torch.int32).numpy().astype("uint16").tofile(owt / f"{name}.bin")
    envs = tmp_path / "envs"
    _paper_copy(envs, small, large)

    result = run_cli("envs", "build", "fix_embedding", "--profile", "paper", "--backend", "docker",
                     "--asset", f"gpt2={small}", "--asset", f"gpt2_xl={large}", "--asset", f"openwebtext={owt}",
                     env={"REBENCH_ENVIRONMENTS": str(envs)}, timeout=1500)
    assert result.returncode == 0, result.stderr

    from rebench.environments.registry import EnvironmentRegistry
    from rebench.images.build import current_environment_image

    env = EnvironmentRegistry(envs).get("fix_embedding")
    image = current_environment_image(env, "paper", engine)
    permuted = build.permute_embedding({"transformer.wte.weight": original})["transformer.wte.weight"]
    needles = {
        "original-fp32": original[:NEEDLE_ROWS].numpy().tobytes(),
        "original-fp16": original[:NEEDLE_ROWS].half().numpy().tobytes(),
        "permuted-fp16": permuted[:NEEDLE_ROWS].half().numpy().tobytes(),  # what the agent gets: must be found
    }
    argv = [f"{name}={needle.hex()}" for name, needle in needles.items()]
    scan = subprocess.run(["docker", "run", "--rm", "--network", "none", "--user", "root", "--entrypoint", "python3",
                           image, "-c", SCAN, *argv], capture_output=True, text=True, timeout=600)
    assert scan.returncode == 0, scan.stderr
    hits = scan.stdout.splitlines()
    assert hits == ["permuted-fp16 /opt/rebench/env/assets/home/large_model.pth"], hits
    # The same holds on the host: the built folder the local backend copies into an attempt.
    built = next((isolated_cache / "assets" / "fix_embedding").glob(f"paper-{env.content_hash('paper')}"))
    for path in (p for p in built.rglob("*") if p.is_file()):
        data = path.read_bytes()
        assert needles["original-fp32"] not in data and needles["original-fp16"] not in data, path
    assert _half_built_paper(isolated_cache / "assets" / "fix_embedding") == []


def _half_built_paper(folder: Path) -> list[Path]:
    """Scratch folders of paper builds left behind. The cache is the run's: other workers may be
    building a tiny profile of fix_embedding at this moment, whose scratch (params.json names its
    profile) is not this build's."""
    left = []
    for scratch in folder.glob(".build-*"):
        with contextlib.suppress(FileNotFoundError, ValueError):  # a tiny build may end, or not have begun, as we look
            if json.loads((scratch / "params.json").read_text())["profile"] == "paper":
                left.append(scratch)
    return left
