"""Build Restricted MLM's assets: `python build.py --profile P --out DIR [--assets IN]`.

paper: OpenWebText from the operator's `openwebtext` asset in IN (`python -m rebench.kit.owt`).

DIR/home:      data/train.bin, data/val.bin (+ meta.json, vocab.json), profile_params.json
DIR/workspace: basic_model.pt / basic_model.json, the trained starting MLP
DIR/protected: heldout.bin, the tokens every score call evaluates on (never shown to the agent);
               final.bin (tiny: the held-out final split, scored once after the attempt,
               docs/heldout.md; paper has none, see the README)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rebench.kit import buildutil, corpus

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "workspace"))

from train import train_basic  # noqa: E402  (the agent's starting train.py trains the starting model)


def build_paper(assets: Path, home: Path, protected: Path) -> None:
    from rebench.kit import owt

    data = home / "data"
    counts = owt.copy_prepared(assets / "openwebtext", train=data / "train.bin", val=data / "val.bin")
    (data / "meta.json").write_text(json.dumps({"vocab_size": owt.VOCAB_SIZE, **counts}) + "\n")
    # Held-out scoring tokens: the last 4M tokens of the validation split; the agent keeps the rest.
    owt.split_off(data / "val.bin", data / "val_visible.bin", protected / "heldout.bin", 4_000_000)
    (data / "val_visible.bin").replace(data / "val.bin")


FINAL_STREAM_SEED = 24
"""tiny: the held-out final split's stream (train.bin, val.bin and heldout.bin are streams 21-23)."""


def build_tiny(params: dict, home: Path, protected: Path) -> None:
    spec = corpus.InteractionSourceSpec()  # not the kit's default source: see the README, "Shortcuts on `tiny`"
    data = home / "data"
    corpus.write_bin(data / "train.bin", corpus.generate(spec, params["train_tokens"], stream_seed=21))
    corpus.write_bin(data / "val.bin", corpus.generate(spec, params["val_tokens"], stream_seed=22))
    corpus.write_bin(protected / "heldout.bin", corpus.generate(spec, params["heldout_tokens"], stream_seed=23))
    # The held-out final split: one more stream of the same source, as long as heldout.bin. Each
    # stream has its own generator (seeded by the source and the stream), so the files above are
    # the bytes they were before this one existed, and the intermediate anchors still hold.
    corpus.write_bin(protected / "final.bin", corpus.generate(spec, params["final_tokens"],
                                                              stream_seed=FINAL_STREAM_SEED))
    corpus.write_meta(data / "meta.json", spec)
    corpus.WordTokenizer.for_spec(spec).save(data / "vocab.json")


def main() -> None:
    args = buildutil.parse_args(__doc__.splitlines()[0])
    params = buildutil.profile_params(HERE, args.profile)
    home, workspace, protected = buildutil.layout(args.out)
    buildutil.seed_everything(0)
    if args.profile == "paper":
        build_paper(buildutil.need_assets(args), home, protected)
    else:
        build_tiny(params, home, protected)
    buildutil.write_params(home, args.profile, params)
    train_basic({**params, "profile": args.profile}, home / "data", workspace)


if __name__ == "__main__":
    main()
