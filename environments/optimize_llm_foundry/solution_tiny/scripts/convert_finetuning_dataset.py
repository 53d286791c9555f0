"""Stage 1: tokenize a JSONL file of prompt/response rows into a split of shards."""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minifoundry import data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data_files", required=True)
    parser.add_argument("--splits", default="train")
    parser.add_argument("--out_root", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--max_seq_len", type=int, required=True)
    parser.add_argument("--num_workers", type=int, default=0)
    args = parser.parse_args()
    rows = data.read_rows(args.data_files)
    samples = data.tokenize_rows(rows, args.tokenizer, args.max_seq_len, args.num_workers)
    for split in args.splits.split(","):
        data.write_split(samples, os.path.join(args.out_root, split), args.max_seq_len)
    print(f"tokenized {len(samples)} rows into {args.out_root}", flush=True)


if __name__ == "__main__":
    main()
