"""The acceptance run of Finetune GPT-2 for QA (issue 15's "Done when"), printed.

1. `rebench run --env nanogpt_chat_rl --agent reference --profile tiny --budget 30m -k 1` on the
   Docker backend: best-of-8 tournaments judged through the gateway, then SFT on the winners;
   expected normalized score 0.8-1.25.
2. A replay of the starting checkpoint (the untuned student copied to finetuned_model, scored,
   submitted): expected within 0.1 of 0.

Both on a fresh database in a scratch folder; each attempt's scores, the scorer's message, the
gateway's meters (the agent's judge calls apart from the scorer's) and the wall time are printed.
The build (the student's pretraining, the baselines' answers) is cached by content hash in the
harness's cache, so only a first run pays for it.

    python -m benchmarks.chat_acceptance [--profile tiny] [--backend docker]   (repo root)
"""

from __future__ import annotations

from benchmarks.acceptance import arguments, reference_and_start

ENV = "nanogpt_chat_rl"


def main() -> None:
    args = arguments(__doc__, budget="30m").parse_args()
    reference_and_start(ENV, args, start_actions="actions:\n  - bash: cp ../student_model.pt finetuned_model\n"
                        "  - score: {}\n  - submit: the starting checkpoint\n",
                        start_label="starting checkpoint", start_tolerance=0.1)


if __name__ == "__main__":
    main()
