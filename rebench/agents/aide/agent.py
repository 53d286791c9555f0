"""`aide`: a tree search over whole solutions in the manner of AIDE (Weco AI), RE-Bench's second scaffold.

Each node is a complete solution (the files the environment scores), the plan that produced
it, the output of its run command and its score. A step drafts a new solution from the task,
debugs a buggy node from its output, or improves the best node (rebench.agents.aide.tree has
the policy). The model answers each step with a plan and whole files in one reply; a second
call reviews the outcome (buggy or not, a summary, the validation metric it reports).

Everything goes through the AgentContext: files are written with `write_file`, run commands
with `bash` (their timeout bounded by the budget), and every node is scored with the
environment's `score` tool. The best node is put back into the solution folder after every
step and at the end, so the score log's best and the final solution agree. Where the score is
hidden or the last score counts, nodes are ranked by the review's metric and the restored best
node is scored once more at the end. Every node is an `aide_node` event, so `rebench attempts
show` and the HTML report can draw the tree. Model calls share the modular agent's provider
code, retries and accounting (rebench.agents.llm).
"""

from __future__ import annotations

import json
import random
import shlex
from typing import Any

from rebench.agents.aide import BEST_NOTE, prompts
from rebench.agents.aide.outputs import KeptOutputs
from rebench.agents.aide.reply import parse_reply
from rebench.agents.aide.settings import AideSettings
from rebench.agents.aide.tree import Node, Step, Tree, diff
from rebench.agents.base import Agent, AgentConfig, AgentContext, LimitExceeded
from rebench.agents.llm import check_model, open_model, parse_agent_settings
from rebench.models import Completion, Message, ModelCaller, ProviderError

START_LIST = ("find . -type f -size -256k -not -path '*/.*' -not -path '*/__pycache__/*' "
              "-not -path '*/node_modules/*' | sort | head -n 60")
RESTORE_MARGIN_S = 5.0
"""Time kept back at the end for putting the best node back in place."""
REVIEW_OUTPUT_TOKENS = 2_048
UNKNOWN = "\x00unknown"
"""Stands for a file's content the agent did not write itself (never equal to a node's text)."""


class AideAgent:
    uses_reference = False

    def __init__(self, config: AgentConfig, settings: AideSettings) -> None:
        self.config = config
        self.settings = settings
        self.start: dict[str, str] = {}
        self.on_disk: dict[str, str | None] = {}
        """What this agent last wrote per path (None: removed), so restoring writes only what differs."""
        self.longest_score_s = 0.0
        self.longest_review_s = 0.0
        self.outputs: KeptOutputs
        self.step_s: list[float] = []
        """Working seconds of each finished step: a step that cannot finish before the end is not started,
        so the attempt never ends on a half-made node instead of the best one."""

    def rank(self, ctx: AgentContext) -> str:
        """What ranks nodes: the score where it is shown and the best one counts, else the review's metric."""
        if self.settings.rank_by != "auto":
            return self.settings.rank_by
        env = ctx.environment
        shown = env.score_visible and env.final_score != "last" and self.settings.score_each_node
        return "score" if shown else "review"

    async def run(self, ctx: AgentContext) -> None:
        settings = self.settings
        tree = Tree(ctx.environment.direction)
        rng = random.Random(ctx.seed)
        async with open_model(self.config, settings, ctx) as model:
            self.start = await self._read_start(ctx)
            self.outputs = KeptOutputs(ctx)
            if settings.keep_outputs:
                await self.outputs.mark_start(ctx)
            main_file = settings.main_file or _main_file(self.start)
            try:
                while settings.max_steps is None or len(tree.nodes) < settings.max_steps:
                    if ctx.remaining_s() <= self._reserve_s(ctx) + self.typical_step_s():
                        break
                    kind, parent = tree.next_step(settings, rng)
                    began = ctx.elapsed_s()
                    node = await self._step(ctx, model.caller, tree, kind, parent, main_file)
                    self.step_s.append(ctx.elapsed_s() - began)
                    tree.add(node)
                    self._log(ctx, tree, node)
                    self.outputs.in_place = node.id
                    best = tree.best()
                    if best is not None and best.id == node.id and settings.keep_outputs:
                        await self.outputs.save(ctx, node.id)
                    elif best is not None and best.id != node.id:
                        await self._put_back(ctx, tree, best)
            except (LimitExceeded, ProviderError):
                await self._finish(ctx, tree, final_score=False)
                raise
        await self._finish(ctx, tree, final_score=True)
        await ctx.submit()

    def typical_step_s(self) -> float:
        """The mean working time of the last three steps (0 before the first)."""
        recent = self.step_s[-3:]
        return sum(recent) / len(recent) if recent else 0.0

    def _reserve_s(self, ctx: AgentContext) -> float:
        final = self.longest_score_s if self.rank(ctx) == "review" else 0.0
        return RESTORE_MARGIN_S + final + self.outputs.longest_s

    async def _read_start(self, ctx: AgentContext) -> dict[str, str]:
        """The starting solution's small text files, shown to the model and put back where a node leaves them."""
        listing = await ctx.bash(START_LIST, timeout=30)
        files: dict[str, str] = {}
        total = 0
        for line in listing.stdout.splitlines():
            path = line.strip().removeprefix("./")
            if not path or total > 4 * self.settings.max_shown_chars:
                continue
            try:
                text = await ctx.read_file(path)
            except OSError:
                continue
            if "\x00" in text or "\ufffd" in text:
                continue  # binary: not something a node rewrites
            files[path] = text
            total += len(text)
        self.on_disk = dict(files)
        return files

    async def _step(self, ctx: AgentContext, caller: ModelCaller, tree: Tree, kind: Step, parent: Node | None,
                    main_file: str) -> Node:
        settings = self.settings
        node_id = len(tree.nodes) + 1
        exec_limit = self._exec_limit(ctx)
        fmt = prompts.reply_format(ctx, main_file, exec_limit)
        limit = settings.max_shown_chars
        if kind == "draft" or parent is None:
            prompt = prompts.draft_prompt(ctx, tree, self.start, fmt, limit)
        elif kind == "debug":
            prompt = prompts.debug_prompt(ctx, parent, fmt, limit)
        else:
            prompt = prompts.improve_prompt(ctx, tree, parent, fmt, limit)
        completion = await caller.complete(prompts.system_prompt(ctx), [Message(role="user", content=prompt)], [],
                                           max_output_tokens=settings.max_output_tokens, turn=node_id)
        reply = parse_reply(completion.text, main_file)
        base = parent.files if parent is not None and kind != "draft" else {}
        node = Node(id=node_id, parent=parent.id if parent is not None and kind != "draft" else None, step=kind,
                    plan=reply.plan, files={**base, **reply.files}, run_command=reply.run_command,
                    debug_depth=parent.debug_depth + 1 if kind == "debug" and parent is not None else 0)
        if reply.problem is not None:
            node.summary = reply.problem
            return node
        await self._restore(ctx, tree, node.files)
        if node.run_command:
            result = await ctx.bash(node.run_command, timeout=self._exec_limit(ctx))
            node.exit_code, node.timed_out = result.exit_code, result.timed_out
            node.output = prompts.cut(_joined(result.stdout, result.stderr), settings.max_shown_chars)
        if settings.score_each_node:
            started = ctx.elapsed_s()
            feedback = await ctx.score()
            self.longest_score_s = max(self.longest_score_s, ctx.elapsed_s() - started)
            node.score_valid = bool(feedback.get("valid"))
            score = feedback.get("score")
            node.score = float(score) if isinstance(score, int | float) and node.score_valid else None
        review = await self._review(ctx, caller, node)
        self._judge(ctx, node, review)
        return node

    def _exec_limit(self, ctx: AgentContext) -> float:
        """A run command may take what is left once the score call and the review after it fit."""
        after = self.longest_review_s + (self.longest_score_s if self.settings.score_each_node else 0.0)
        return max(1.0, min(self.settings.exec_timeout_s, ctx.remaining_s() - self._reserve_s(ctx) - after))

    async def _review(self, ctx: AgentContext, caller: ModelCaller, node: Node) -> dict[str, Any]:
        """The second call: the model judges the run through a tool call (or a JSON object in its text)."""
        prompt = prompts.review_prompt(ctx, node, self.settings.max_shown_chars, self.rank(ctx) == "review")
        started = ctx.elapsed_s()
        completion = await caller.complete(
            "You review the outcome of one candidate solution's run.", [Message(role="user", content=prompt)],
            [prompts.REVIEW_SPEC], max_output_tokens=min(REVIEW_OUTPUT_TOKENS, self.settings.max_output_tokens),
            turn=node.id)
        self.longest_review_s = max(self.longest_review_s, ctx.elapsed_s() - started)
        return _review_arguments(completion)

    def _judge(self, ctx: AgentContext, node: Node, review: dict[str, Any]) -> None:
        summary = review.get("summary")
        node.summary = summary.strip() if isinstance(summary, str) else ""
        failed = bool(node.exit_code) or node.timed_out or node.score_valid is False
        metric = review.get("metric")
        own = float(metric) if isinstance(metric, int | float) and not isinstance(metric, bool) else None
        if self.rank(ctx) == "score":
            node.metric = node.score
        else:
            node.metric = own
            failed = failed or review.get("is_bug") is not False
        node.buggy = failed or node.metric is None

    async def _restore(self, ctx: AgentContext, tree: Tree, files: dict[str, str]) -> None:
        """Make the solution folder hold exactly `files` over the starting solution."""
        paths = set(self.on_disk) | set(files) | {p for n in tree.nodes for p in n.files}
        gone: list[str] = []
        for path in sorted(paths):
            wanted = files.get(path, self.start.get(path))
            if self.on_disk.get(path) == wanted:
                continue  # already so (a path never written and not wanted is None on both sides)
            if wanted is None:
                gone.append(path)
            else:
                await ctx.write_file(path, wanted)
            self.on_disk[path] = wanted
        if gone:
            await ctx.bash("rm -f -- " + " ".join(shlex.quote(p) for p in gone), timeout=30)

    async def _put_back(self, ctx: AgentContext, tree: Tree, best: Node | None) -> None:
        """The best node's files (none: the start's), and the outputs its run left where they were kept."""
        await self._restore(ctx, tree, best.files if best is not None else {})
        if self.settings.keep_outputs:
            for path in await self.outputs.put_back(ctx, best.id if best is not None else None):
                if path in self.on_disk:  # a file nodes write, copied back: the next restore writes it again
                    self.on_disk[path] = UNKNOWN

    async def _finish(self, ctx: AgentContext, tree: Tree, *, final_score: bool) -> None:
        """Put the best node (or, with none working, the starting solution) back; score it where nodes
        were ranked by the agent's own metric, so the last score call is the best node's."""
        best = tree.best()
        await self._put_back(ctx, tree, best)
        ctx.log_event("note", message=BEST_NOTE, data={"node": best.id if best is not None else None,
                                                         "metric": best.metric if best is not None else None,
                                                         "nodes": len(tree.nodes)})
        needs_score = self.rank(ctx) == "review" or not self.settings.score_each_node
        if final_score and best is not None and needs_score and ctx.remaining_s() > 0:
            await ctx.score()

    def _log(self, ctx: AgentContext, tree: Tree, node: Node) -> None:
        before = tree.get(node.parent).files if node.parent is not None else self.start
        tail = prompts.cut(node.output, self.settings.output_tail_chars)
        ctx.log_event("aide_node", node=node.id, parent=node.parent, step=node.step, plan=node.plan,
                      diff=diff({**self.start, **before}, node.files), files=sorted(node.files),
                      run_command=node.run_command, exit_code=node.exit_code, timed_out=node.timed_out,
                      output_tail=tail, score=node.score, score_valid=node.score_valid, metric=node.metric,
                      buggy=node.buggy, summary=node.summary)


def _joined(stdout: str, stderr: str) -> str:
    return stdout + (("\n" if stdout and not stdout.endswith("\n") else "") + stderr if stderr else "")


def _main_file(start: dict[str, str]) -> str:
    """Where an unnamed code block goes: the starting solution's only file, else its only top-level
    .py file, else solution.py."""
    if len(start) == 1:
        return next(iter(start))
    python = [p for p in start if p.endswith(".py") and "/" not in p]
    return python[0] if len(python) == 1 else "solution.py"


def _review_arguments(completion: Completion) -> dict[str, Any]:
    for call in completion.tool_calls:
        if call.name == prompts.REVIEW_TOOL and not call.parse_error:
            return call.arguments
    text = completion.text
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            found = json.loads(text[start:end + 1])
        except json.JSONDecodeError:
            return {}
        return found if isinstance(found, dict) else {}
    return {}


def create_agent(config: AgentConfig) -> Agent:
    """Built-in entry point; a missing model, key or bad agent arg is a one-line error here."""
    settings = parse_agent_settings(AideSettings, config.args, "aide")
    check_model(config)
    return AideAgent(config, settings)
