"""Makespan of a RE-Bench-shaped campaign on one 8-GPU host: the queue policy against FCFS.

No sandboxes: attempts are durations (rebench.scheduler.simulate), scheduled by the same
policy code the campaign queue runs (rebench.scheduler.policy). The campaign is the paper's
shape: the seven environments with their paper resources (GPUs 4, 1, 1, 6, 2, 2, 0; CPUs and
memory from the per-task table), and per environment the paper's allocations: a modular-style
agent at 30 min x 16, an AIDE-style agent at 2 h x 4, and 8-hour runs x 3. Each attempt's true
wall time is its budget times a factor drawn per attempt (seeded): most run 0-10 % over (paused
scoring), a quarter end early (submitted) at 30-100 %. The scheduler only knows the budgets.

It prints, per policy, makespan / lower bound, where the lower bound is max(total GPU-time /
GPUs, the longest attempt). Goal for the default policy: <= 1.05.

    python -m benchmarks.makespan [--gpus 8] [--seeds 5]   (from the repo root)
"""

from __future__ import annotations

import argparse
import random

from rebench.scheduler.policy import POLICIES, Job, Need
from rebench.scheduler.simulate import SimJob, simulate

# name: (GPUs, CPUs, memory GB), paper profiles (reference/re-bench-environments.md, section 2.0)
PAPER_ENVIRONMENTS: dict[str, tuple[int, float, float]] = {
    "optimize_llm_foundry": (4, 52, 400),
    "triton_cumsum": (1, 13, 100),
    "fix_embedding": (1, 13, 100),
    "small_scaling_law": (6, 48, 400),
    "restricted_mlm": (2, 26, 200),
    "nanogpt_chat_rl": (2, 23, 200),
    "rust_codecontests_inference": (0, 20, 100),
}
ALLOCATIONS = [("modular", 1800.0, 16), ("aide", 7200.0, 4), ("modular-8h", 28800.0, 3)]
HOST = Need(gpus=8, cpus=208, memory_gb=2000, slots=10**6)
"""A typical 8 x H100 node: 208 vCPUs, 2 TB of memory."""


def paper_campaign(seed: int) -> list[SimJob]:
    """Attempts in plan order (environment by environment, agent by agent, as `rebench run` plans)."""
    rng = random.Random(seed)
    jobs = []
    for gpus, cpus, memory in PAPER_ENVIRONMENTS.values():
        for _agent, budget, k in ALLOCATIONS:
            for _ in range(k):
                factor = rng.uniform(0.3, 1.0) if rng.random() < 0.25 else rng.uniform(1.0, 1.1)
                need = Need(gpus=gpus, cpus=cpus, memory_gb=memory, slots=1)
                jobs.append(SimJob(Job(id=len(jobs), need=need, duration_s=budget, order=len(jobs)),
                                   actual_s=budget * factor))
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=5, help="campaigns drawn (true durations differ)")
    args = parser.parse_args()
    host = Need(gpus=args.gpus, cpus=HOST.cpus, memory_gb=HOST.memory_gb, slots=HOST.slots)
    jobs = paper_campaign(0)
    print(f"campaign: {len(jobs)} attempts on {len(PAPER_ENVIRONMENTS)} environments, {args.gpus} GPUs, "
          f"{host.cpus:.0f} CPUs, {host.memory_gb:.0f} GB; {args.seeds} draws of the true durations")
    print(f"{'policy':<10} {'makespan / lower bound':>24}   {'worst':>6}   makespan (h), lower bound (h)")
    for policy in POLICIES:
        results = [simulate(paper_campaign(seed), host, policy) for seed in range(args.seeds)]
        ratios = [r.ratio for r in results]
        mean = sum(ratios) / len(ratios)
        print(f"{policy:<10} {mean:>24.3f}   {max(ratios):>6.3f}   "
              f"{results[0].makespan_s / 3600:.1f}, {results[0].lower_bound_s / 3600:.1f}")


if __name__ == "__main__":
    main()
