#!/usr/bin/env bash
# The reference solution. tiny, ci: the same finetuning in one process, without dataloader worker
# processes, without the evaluation pass (it does not change the weights), and with the Hugging Face
# model saved straight from memory instead of through a full checkpoint and a conversion.
# paper (LLM Foundry): the same three stages without the evaluation data, with one dataloader worker
# and a weights-only checkpoint (not tested on GPUs here; see the environment's README).
set -euo pipefail
cd "$(dirname "$0")"
BASE_MODEL="$(cd .. && pwd)/base_model"
rm -rf trained_model
if [ -d minifoundry ]; then
  python scripts/fast_finetune.py --data_files ../train_data.jsonl --base_model "$BASE_MODEL" \
    --config finetune.yaml --out trained_model
  exit 0
fi
FOUNDRY="$(python -c 'import llmfoundry, os; print(os.path.dirname(os.path.dirname(llmfoundry.__file__)))')"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
rm -rf finetuning_tokens ftout
python "$FOUNDRY/scripts/data_prep/convert_finetuning_dataset.py" --dataset json --splits train \
  --data_files ../train_data.jsonl --out_root finetuning_tokens --skip-preprocessing --max_seq_len 4096 \
  --tokenizer "$BASE_MODEL"
composer "$FOUNDRY/scripts/train/train.py" finetune.yaml data_local=finetuning_tokens \
  model_name_or_path="$BASE_MODEL" train_loader.dataset.split=train eval_loader.dataset.split=train eval_interval=0 \
  train_loader.num_workers=1 eval_loader.num_workers=0 save_weights_only=true save_folder=ftout
python "$FOUNDRY/scripts/inference/convert_composer_to_hf.py" --composer_path ftout/latest-rank0.pt \
  --hf_output_path trained_model --output_precision bf16
