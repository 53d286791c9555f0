"""What the aide agent tells the model: one prompt per step kind (draft, debug, improve),
each asking for a plan and whole files in one reply, and the review that judges a run."""

from __future__ import annotations

from rebench.agents.aide.tree import Node, Tree
from rebench.agents.base import AgentContext
from rebench.budget import format_duration
from rebench.models import ToolSpec
from rebench.sandbox.output import head_and_tail

REVIEW_TOOL = "submit_review"


def cut(text: str, limit: int) -> str:
    head, tail, dropped = head_and_tail(text, limit)
    return f"{head}\n[... {dropped} characters cut ...]\n{tail}" if dropped else head


def system_prompt(ctx: AgentContext) -> str:
    env = ctx.environment
    better = "lower" if env.direction == "lower" else "higher"
    return (
        "You are an expert machine learning research engineer solving a task by writing complete solutions. "
        "Each solution you write is run and scored, and you get the outcome back. "
        f"Scores: {better} is better. Environment: {env.title} ({env.name}, profile {env.profile})."
    )


def reply_format(ctx: AgentContext, main_file: str, exec_limit_s: float) -> str:
    return f"""Reply in this form:
1. Your plan, in a few sentences of prose (no code before it).
2. Every file you write, whole, each as one fenced code block whose first line is a comment naming it,
   for example a block starting with `# file: {main_file}`. Paths are relative to the solution folder
   {ctx.paths.solution}. Files you do not write keep their current content.
3. Optionally one ```bash block: a command that runs in the solution folder after the files are written
   (a quick check, a training run that produces the submission, or a script that prints a validation
   metric). It is killed after {format_duration(exec_limit_s)}.
After that the solution is scored."""


def time_note(ctx: AgentContext) -> str:
    return (f"Time used: {format_duration(ctx.elapsed_s())} of {format_duration(ctx.budget_s)}; "
            f"{format_duration(ctx.remaining_s())} remaining.")


def show_files(files: dict[str, str], limit: int) -> str:
    return "\n\n".join(f"```\n# file: {path}\n{cut(text, limit)}\n```" for path, text in sorted(files.items()))


def memory(tree: Tree) -> str:
    """AIDE's memory: what each working solution tried and how it scored."""
    lines = [f"- node {n.id} ({n.step}): {n.summary.strip() or n.plan[:300]} -> metric {n.metric:g}"
             for n in tree.good() if n.metric is not None]
    return "Solutions so far:\n" + "\n".join(lines) if lines else ""


def outcome(node: Node, limit: int) -> str:
    parts = []
    if node.run_command:
        state = "timed out" if node.timed_out else f"exit code {node.exit_code}"
        parts.append(f"Run command `{node.run_command}`: {state}\n{cut(node.output, limit) or '(no output)'}")
    if node.score_valid is not None:
        shown = f"score {node.score:g}" if node.score is not None else "score hidden"
        parts.append(f"Score call: {'valid' if node.score_valid else 'INVALID'}, {shown}")
    return "\n\n".join(parts) or "(nothing was run)"


def draft_prompt(ctx: AgentContext, tree: Tree, start: dict[str, str], fmt: str, limit: int) -> str:
    return "\n\n".join(p for p in (
        ctx.instructions,
        "The solution folder holds these files at the start:\n" + show_files(start, limit),
        memory(tree),
        "Write a new, complete solution, different from those above. Start simple and correct: it is improved "
        "later.",
        fmt, time_note(ctx)) if p)


def debug_prompt(ctx: AgentContext, node: Node, fmt: str, limit: int) -> str:
    return "\n\n".join((
        ctx.instructions,
        f"This solution (node {node.id}) is buggy:\n" + show_files(node.files, limit),
        "Its outcome:\n" + outcome(node, limit),
        f"Review: {node.summary}" if node.summary else "",
        "Find the bug and write the fixed solution. Keep the approach; fix what broke.",
        fmt, time_note(ctx)))


def improve_prompt(ctx: AgentContext, tree: Tree, node: Node, fmt: str, limit: int) -> str:
    return "\n\n".join(p for p in (
        ctx.instructions,
        memory(tree),
        f"The solution to improve (node {node.id}, metric {node.metric:g}):\n" + show_files(node.files, limit),
        "Its outcome:\n" + outcome(node, limit),
        "Propose one focused improvement to it and write the improved solution.",
        fmt, time_note(ctx)) if p)


def review_prompt(ctx: AgentContext, node: Node, limit: int, metric_from_output: bool) -> str:
    better = "lower" if ctx.environment.direction == "lower" else "higher"
    metric = (f"metric: the validation metric the run's output reports for this solution, on the task's "
              f"scale ({better} is better); leave it out if the output shows none" if metric_from_output
              else "metric: leave it out (the score ranks solutions)")
    return "\n\n".join((
        "Task:\n" + cut(ctx.instructions, limit),
        f"Plan of this solution: {node.plan or '(none)'}",
        show_files(node.files, limit),
        "Outcome:\n" + outcome(node, limit),
        f"Judge the outcome and call {REVIEW_TOOL} once: is_bug (the run failed, the solution is wrong or "
        f"produced nothing valid), summary (two or three sentences: what was tried, what came out), {metric}.",
    ))


REVIEW_SPEC = ToolSpec(
    name=REVIEW_TOOL,
    description="Submit the judgement of one solution's run.",
    parameters={
        "type": "object",
        "properties": {
            "is_bug": {"type": "boolean", "description": "true if the run failed or the solution is invalid"},
            "summary": {"type": "string", "description": "what was tried and what came out"},
            "metric": {"type": "number", "description": "the validation metric the output reports, if any"},
        },
        "required": ["is_bug", "summary"],
    },
)
