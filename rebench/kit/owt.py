"""OpenWebText with the GPT-2 tokenizer, for the `paper` profiles (needs network and disk).

An operator makes the `openwebtext` asset with it, once, on a machine with network:
`python -m rebench.kit.owt DIR` (needs `tiktoken` and `datasets`); the paper builds then
read DIR through `--asset openwebtext=DIR` and download nothing. It downloads the
`Skylion007/openwebtext` dataset from the Hugging Face hub, splits off a small
validation part with a fixed seed (as nanoGPT does), encodes every document with the
GPT-2 BPE (tiktoken), appends the end-of-text token 50256 and writes nanoGPT's
flat uint16 `.bin` files. About 9B training tokens (17 GB).

Part of the environment kit's build-time code.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

EOT = 50256
VOCAB_SIZE = 50257


def prepare_openwebtext(out_dir: Path, val_fraction: float = 0.0005, seed: int = 2357, workers: int = 8) -> dict:
    """Write out_dir/train.bin and out_dir/val.bin; return their token counts."""
    import tiktoken  # installed in paper images only
    from datasets import load_dataset

    encoder = tiktoken.get_encoding("gpt2")
    dataset = load_dataset("Skylion007/openwebtext", num_proc=workers, trust_remote_code=True)
    split = dataset["train"].train_test_split(test_size=val_fraction, seed=seed, shuffle=True)
    split["val"] = split.pop("test")

    def encode(example: dict) -> dict:
        ids = [*encoder.encode_ordinary(example["text"]), EOT]
        return {"ids": ids, "len": len(ids)}

    counts = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, part in split.items():
        tokenized = part.map(encode, remove_columns=["text"], num_proc=workers)
        total = int(np.sum(tokenized["len"], dtype=np.uint64))
        array = np.memmap(out_dir / f"{name}.bin", dtype=np.uint16, mode="w+", shape=(total,))
        position = 0
        for shard in range(1024):
            chunk = tokenized.shard(num_shards=1024, index=shard, contiguous=True).with_format("numpy")
            ids = np.concatenate(chunk["ids"]) if len(chunk) else np.empty(0, dtype=np.uint16)
            array[position:position + len(ids)] = ids
            position += len(ids)
        array.flush()
        counts[name] = total
    return counts


def copy_prepared(source: Path, *, train: Path, val: Path) -> dict:
    """Copy a prepared folder's train.bin and val.bin (what `prepare_openwebtext` writes) to
    their places in a build; return their token counts."""
    counts = {}
    for name, dest in (("train", train), ("val", val)):
        path = source / f"{name}.bin"
        if not path.is_file() or path.stat().st_size % 2:
            raise SystemExit(f"{path} is missing or not a uint16 token file; make the folder with "
                             "`python -m rebench.kit.owt DIR`")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
        counts[name] = path.stat().st_size // 2
    return counts


def split_off(source: Path, keep: Path, held_out: Path, held_out_tokens: int) -> None:
    """Split a .bin in two: the last `held_out_tokens` go to `held_out` (the scorer's data),
    the rest to `keep` (what the agent may read)."""
    data = np.memmap(source, dtype=np.uint16, mode="r")
    cut = len(data) - held_out_tokens
    np.asarray(data[:cut]).tofile(keep)
    np.asarray(data[cut:]).tofile(held_out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m rebench.kit.owt DIR  (writes DIR/train.bin and DIR/val.bin)")
    print(prepare_openwebtext(Path(sys.argv[1])))
