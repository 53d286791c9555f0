"""The `reference` agent: lays the environment's reference solution over the
workspace, runs its `run.sh` if it has one (training, for example), scores and
submits. It is the oracle that calibration and CI use to check that an
environment can reach a normalized score of 1.

Where scores are timings (`hardware_dependent` profiles) under RE-Bench's rule it
scores `repeats` times (agent argument, default 3), as calibration measures the
anchors: the best call counts on both sides, so a call slowed by a busy machine
does not decide the result. Under `final_score = "rescore_best"` it scores once:
the harness re-scores that solution `rescore.repeats` times when the attempt ends
and takes the median, as calibration does for the anchors."""

from __future__ import annotations

from rebench.agents.base import AgentConfig, AgentContext
from rebench.errors import RebenchError


class ReferenceAgent:
    uses_reference = True
    arguments = frozenset({"repeats"})  # its `--agent-arg` keys; any other is refused (rebench.agents.registry)

    def __init__(self, repeats: int = 3) -> None:
        self.repeats = repeats

    async def run(self, ctx: AgentContext) -> None:
        if ctx.reference_dir is None:
            raise RebenchError(f"environment {ctx.environment.name!r} has no reference/ folder")
        await ctx.upload_dir(ctx.reference_dir, ctx.paths.solution)
        if (ctx.reference_dir / "run.sh").is_file():
            result = await ctx.bash("bash run.sh", timeout=ctx.remaining_s())
            if not result.ok:
                raise RuntimeError(f"reference run.sh failed with exit {result.exit_code}: {result.stderr[-500:]}")
        noisy = ctx.environment.hardware_dependent and ctx.environment.final_score != "rescore_best"
        for _ in range(self.repeats if noisy else 1):
            await ctx.score()
        await ctx.submit()


def create_agent(config: AgentConfig) -> ReferenceAgent:
    raw = config.args.get("repeats", "3")
    if not raw.isdigit() or int(raw) < 1:
        raise RebenchError(f"reference agent: repeats={raw!r} is not allowed; give a whole number of at least 1")
    return ReferenceAgent(int(raw))
