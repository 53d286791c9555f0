"""The `reference` agent: lays the environment's reference solution over the
workspace, runs its `run.sh` if it has one (training, for example), scores and
submits. It is the oracle that calibration and CI use to check that an
environment can reach a normalized score of 1."""

from __future__ import annotations

from rebench.agents.base import AgentConfig, AgentContext
from rebench.errors import RebenchError


class ReferenceAgent:
    uses_reference = True

    async def run(self, ctx: AgentContext) -> None:
        if ctx.reference_dir is None:
            raise RebenchError(f"environment {ctx.environment.name!r} has no reference/ folder")
        await ctx.upload_dir(ctx.reference_dir, ctx.paths.solution)
        if (ctx.reference_dir / "run.sh").is_file():
            result = await ctx.bash("bash run.sh", timeout=ctx.remaining_s())
            if not result.ok:
                raise RuntimeError(f"reference run.sh failed with exit {result.exit_code}: {result.stderr[-500:]}")
        await ctx.score()
        await ctx.submit()


def create_agent(config: AgentConfig) -> ReferenceAgent:
    return ReferenceAgent()
