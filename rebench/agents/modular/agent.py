"""`modular`: a ReAct agent in the manner of METR's Modular scaffold.

Each turn the model sees the conversation so far plus a note of time used and
left, and answers with native tool calls (bash, python, score, score_log,
submit); each result goes back as the next message. The model client, retries
and accounting come from rebench.agents.llm (shared with the aide agent); everything the agent does goes
through the AgentContext, so it is timed, limited and recorded.
"""

from __future__ import annotations

from rebench.agents.base import Agent, AgentConfig, AgentContext
from rebench.agents.llm import check_model, open_model
from rebench.agents.modular.history import ConversationSize, trim_oldest
from rebench.agents.modular.prompts import CUT_OFF, CUT_OFF_REASONS, NO_TOOL_CALL, system_prompt, time_note
from rebench.agents.modular.settings import ModularSettings, parse_settings
from rebench.agents.modular.tools import SUBMIT, ToolRunner, tool_specs
from rebench.models import Completion, ContextWindowExceeded, Message, ModelCaller, ProviderError

MAX_OVERFLOW_RECOVERIES = 3


class ModularAgent:
    uses_reference = False

    def __init__(self, config: AgentConfig, settings: ModularSettings) -> None:
        self.config = config
        self.settings = settings
        self.fill = settings.context_fill
        """The share of the window the conversation may fill; halved after each overflow the
        provider reports and kept for later turns, so they do not fail the same way first."""
        self.size = ConversationSize()
        """Each message's size, measured once: the estimate before each call costs the new messages."""

    async def run(self, ctx: AgentContext) -> None:
        async with open_model(self.config, self.settings, ctx) as model:
            await self._loop(ctx, model.caller, model.window)

    async def _loop(self, ctx: AgentContext, caller: ModelCaller, window: int) -> None:
        settings = self.settings
        system = system_prompt(ctx, settings.bash_timeout_s, settings.bash_timeout_max_s)
        runner = ToolRunner(ctx, settings)

        def note() -> str:
            return time_note(ctx, caller.tokens_used, caller.cost_used_usd)

        messages = [Message(role="user", content=f"{ctx.instructions}\n\n{note()}")]
        idle = 0
        turn = 0
        while True:
            if ctx.remaining_s() <= 0:
                ctx.log_event("budget_spent", turn=turn)
                return
            turn += 1
            completion = await self._complete(ctx, caller, system, messages, window, turn)
            messages.append(Message(role="assistant", content=completion.text, tool_calls=completion.tool_calls))
            if not completion.tool_calls:
                idle += 1
                if settings.max_idle_turns is not None and idle >= settings.max_idle_turns:
                    ctx.log_event("agent_gave_up", reason=f"{idle} replies in a row without a tool call")
                    return
                nudge = NO_TOOL_CALL
                if completion.stop_reason in CUT_OFF_REASONS:
                    nudge = CUT_OFF.format(limit=settings.max_output_tokens)
                messages.append(Message(role="user", content=f"{nudge}\n\n{note()}"))
                continue
            idle = 0
            for call in completion.tool_calls:
                shown = await runner.run(call)
                messages.append(Message(role="tool", tool_call_id=call.id, tool_name=call.name, content=shown))
                ctx.log_event(
                    "tool_result",
                    turn=turn,
                    tool=call.name,
                    call_id=call.id,
                    arguments=call.arguments,
                    output=shown,
                )
                if call.name == SUBMIT and not call.parse_error:
                    return
            messages.append(Message(role="user", content=note()))

    async def _complete(
        self,
        ctx: AgentContext,
        caller: ModelCaller,
        system: str,
        messages: list[Message],
        window: int,
        turn: int,
    ) -> Completion:
        """One model call; old tool outputs give way when the context would overflow."""
        settings = self.settings
        tools = tool_specs(settings)
        for _ in range(MAX_OVERFLOW_RECOVERIES + 1):
            budget = int(window * self.fill) - settings.max_output_tokens
            if self.size.tokens(system, messages, tools, settings.chars_per_token) > budget:
                removed = trim_oldest(system, messages, tools, budget_tokens=budget,
                                      chars_per_token=settings.chars_per_token, size=self.size)
                if removed:
                    ctx.log_event("context_trimmed", turn=turn, messages=removed, budget_tokens=budget)
            try:
                return await caller.complete(
                    system, messages, tools, max_output_tokens=settings.max_output_tokens, turn=turn
                )
            except ProviderError as err:
                if not err.context_overflow:
                    raise
                self.fill /= 2
                ctx.log_event("context_target_reduced", turn=turn, context_fill=self.fill)
        raise ContextWindowExceeded(
            f"the conversation does not fit the model's context window ({window} tokens) even after trimming "
            f"old tool outputs {MAX_OVERFLOW_RECOVERIES} times"
        )


def create_agent(config: AgentConfig) -> Agent:
    """Built-in entry point; a missing model, key or bad agent arg is a one-line error here."""
    settings = parse_settings(config.args)
    check_model(config)
    return ModularAgent(config, settings)
