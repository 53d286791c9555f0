"""A small LLM Foundry for the CPU: the same three stages (tokenize into shards, train from a YAML
config with checkpoints, convert the checkpoint to a Hugging Face model), in plain PyTorch and
transformers, because LLM Foundry and Composer cannot be installed beside the CPU build of PyTorch
this environment uses (see the environment's README)."""
