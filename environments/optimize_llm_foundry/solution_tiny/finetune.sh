#!/usr/bin/env bash
# Finetune the base model (../base_model) on ../train_data.jsonl; the weights go to trained_model/.
# Three stages, as with LLM Foundry: tokenize into shards, train (checkpoints in ftout/), convert
# the last checkpoint to a Hugging Face model folder.
set -euo pipefail
cd "$(dirname "$0")"
BASE_MODEL="$(cd .. && pwd)/base_model"
TRAIN_DATA=../train_data.jsonl

rm -rf finetuning_tokens
python scripts/convert_finetuning_dataset.py --data_files "$TRAIN_DATA" --splits train \
  --out_root finetuning_tokens --tokenizer "$BASE_MODEL" --max_seq_len 64 --num_workers 4
cp -r finetuning_tokens/train finetuning_tokens/valid

rm -rf ftout
python scripts/train.py finetune.yaml data_local=finetuning_tokens model_name_or_path="$BASE_MODEL" \
  train_loader.dataset.split=train eval_loader.dataset.split=valid save_folder=ftout

rm -rf trained_model
python scripts/convert_composer_to_hf.py --composer_path ftout/latest-rank0.pt \
  --hf_output_path trained_model --output_precision fp32
