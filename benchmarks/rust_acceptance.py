"""The acceptance run of Scaffolding for Rust CodeContests (issue 14's "Done when"), printed.

1. `rebench run --env rust_codecontests_inference --agent reference --profile tiny --budget 20m -k 1`
   on the Docker backend: the reference solution (best-of-8 with public-test filtering) through the
   gateway; expected normalized score 0.8-1.25.
2. A replay of the unchanged starting solution (score, then submit): expected within 0.1 of 0.

Both on a fresh database in a scratch folder; each attempt's scores, the scorer's message,
gateway usage and the wall time are printed. The build (problems and the model's training) is
cached by content hash in the harness's cache, so only a first run pays for it.

    python -m benchmarks.rust_acceptance [--profile tiny] [--backend docker]   (repo root)
"""

from __future__ import annotations

from benchmarks.acceptance import arguments, reference_and_start

ENV = "rust_codecontests_inference"


def main() -> None:
    args = arguments(__doc__, budget="20m").parse_args()
    reference_and_start(ENV, args, start_actions="actions:\n  - score: {}\n  - submit: starting solution\n",
                        start_label="starting solution", start_tolerance=0.1)


if __name__ == "__main__":
    main()
