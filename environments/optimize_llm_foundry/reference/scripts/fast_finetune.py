"""The three stages of finetune.sh in one process: tokenize (no worker pool), train as finetune.yaml
says but with the batches loaded in this process and no evaluation (it does not change the
weights), then save the Hugging Face model from memory."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minifoundry import config, data, trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data_files", required=True)
    parser.add_argument("--base_model", required=True)
    parser.add_argument("--config", default="finetune.yaml")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tokens-", dir=".") as tokens:
        settings = config.load(args.config, [f"data_local={tokens}", f"model_name_or_path={args.base_model}",
                                             "train_loader.num_workers=0", "eval_loader=null", "save_folder=null",
                                             "console_log_interval=0ba"])
        samples = data.tokenize_rows(data.read_rows(args.data_files), args.base_model, int(settings["max_seq_len"]))
        data.write_split(samples, os.path.join(tokens, "train"), int(settings["max_seq_len"]))
        model = trainer.train(settings)
    model.save_pretrained(args.out)
    data._tokenizer.save_pretrained(args.out)


if __name__ == "__main__":
    main()
