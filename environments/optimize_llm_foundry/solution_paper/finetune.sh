#!/usr/bin/env bash
# Finetune ../base_model (deepseek-coder-1.3b-base) on ../train_data.jsonl with LLM Foundry on the
# machine's GPUs; the weights go to trained_model/. Three stages: tokenize into MDS shards, train
# with Composer (FSDP, checkpoints in ftout/), convert the last checkpoint to Hugging Face format.
set -euo pipefail
cd "$(dirname "$0")"
BASE_MODEL="$(cd .. && pwd)/base_model"
FOUNDRY="$(python -c 'import llmfoundry, os; print(os.path.dirname(os.path.dirname(llmfoundry.__file__)))')"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

rm -rf finetuning_tokens
python "$FOUNDRY/scripts/data_prep/convert_finetuning_dataset.py" --dataset json --splits train \
  --data_files ../train_data.jsonl --out_root finetuning_tokens --skip-preprocessing --max_seq_len 4096 \
  --tokenizer "$BASE_MODEL"
cp -r finetuning_tokens/train finetuning_tokens/valid

rm -rf ftout
composer "$FOUNDRY/scripts/train/train.py" finetune.yaml data_local=finetuning_tokens \
  model_name_or_path="$BASE_MODEL" train_loader.dataset.split=train eval_loader.dataset.split=valid \
  eval_interval=0 save_folder=ftout

rm -rf trained_model
python "$FOUNDRY/scripts/inference/convert_composer_to_hf.py" --composer_path ftout/latest-rank0.pt \
  --hf_output_path trained_model --output_precision bf16

find . -type d -name "tokenizer-save-dir-*" -exec rm -r {} +
