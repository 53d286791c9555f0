"""Stage 3: turn a training checkpoint into a Hugging Face model folder (config, weights, tokenizer)."""

from __future__ import annotations

import argparse

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--composer_path", required=True)
    parser.add_argument("--hf_output_path", required=True)
    parser.add_argument("--output_precision", default="fp32", choices=sorted(PRECISIONS))
    args = parser.parse_args()
    checkpoint = torch.load(args.composer_path, map_location="cpu", weights_only=True)
    source = checkpoint["integrations"]["model_name_or_path"]
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source), dtype=torch.float32)
    model.load_state_dict(checkpoint["state"]["model"])
    model.to(PRECISIONS[args.output_precision]).save_pretrained(args.hf_output_path)
    AutoTokenizer.from_pretrained(source).save_pretrained(args.hf_output_path)
    print(f"wrote {args.hf_output_path}", flush=True)


if __name__ == "__main__":
    main()
