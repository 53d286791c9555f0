"""The environment's own model as an upstream: chat and completions in OpenAI's format, generate() in a
worker thread. It writes a whole answer at once, so a streamed request gets that answer as a short
stream of chat chunks (its text, its finish, its usage), which the gateway converts like any other."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from rebench.gateway.formats import dumps
from rebench.gateway.local import LocalModel, request_seed
from rebench.gateway.translate import messages_to_chat
from rebench.gateway.upstreams import (
    MAX_N,
    Reply,
    UpstreamError,
    int_field,
    max_tokens_of,
    temperature_of,
)


class _Chunks:
    """A whole chat answer as the events of a stream."""

    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks = chunks

    async def events(self) -> AsyncIterator[tuple[str, str]]:
        for chunk in self.chunks:
            yield "message", dumps(chunk)
        yield "message", "[DONE]"

    async def aclose(self) -> None:
        return None


class LocalUpstream:
    """The environment's model, in this process; generate() in a worker thread."""

    formats = frozenset({"chat", "completions"})

    def __init__(self, model: LocalModel, model_name: str, max_tokens: int) -> None:
        self.model = model
        self.model_name = model_name
        self.max_tokens = max_tokens

    def input_bound(self, fmt: str, body: dict[str, Any]) -> int:
        """Exact: the model's own count of the prompt it will be given."""
        return self.model.count_tokens(self._chat_prompt(body) if fmt == "chat" else self._prompt(body))

    def _chat_prompt(self, body: dict[str, Any]) -> str:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise UpstreamError(400, "messages must be a non-empty list of message objects", "invalid_request_error")
        return self.model.chat_prompt(messages)

    @staticmethod
    def _prompt(body: dict[str, Any]) -> str:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise UpstreamError(400, "prompt must be a string", "invalid_request_error")
        return prompt

    async def _generate(self, prompt: str, body: dict[str, Any]) -> tuple[list[Any], int]:
        n = int_field(body, "n", 1, 1, MAX_N)
        samples = await asyncio.to_thread(
            self.model.generate, prompt, n=n, temperature=temperature_of(body),
            max_tokens=max_tokens_of(body, self.max_tokens), seed=request_seed(body))
        return samples, self.model.count_tokens(prompt)

    def _envelope(self, kind: str, choices: list[dict[str, Any]], input_tokens: int,
                  output_tokens: int) -> Reply:
        body = {
            "id": f"{kind}-{time.time_ns():x}", "object": kind, "created": int(time.time()),
            "model": self.model_name, "choices": choices,
            "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
                      "total_tokens": input_tokens + output_tokens},
        }
        return Reply(body=body, input_tokens=input_tokens, output_tokens=output_tokens)

    async def call(self, fmt: str, body: dict[str, Any]) -> Reply:
        if fmt == "chat":
            samples, input_tokens = await self._generate(self._chat_prompt(body), body)
            choices = [{"index": i, "message": {"role": "assistant", "content": s.text},
                        "finish_reason": s.finish_reason, "logprobs": None} for i, s in enumerate(samples)]
            return self._envelope("chat.completion", choices, input_tokens, sum(s.output_tokens for s in samples))
        samples, input_tokens = await self._generate(self._prompt(body), body)
        choices = [{"index": i, "text": s.text, "finish_reason": s.finish_reason, "logprobs": None}
                   for i, s in enumerate(samples)]
        return self._envelope("text_completion", choices, input_tokens, sum(s.output_tokens for s in samples))

    async def stream(self, fmt: str, body: dict[str, Any]) -> _Chunks:
        reply = (await self.call("chat", body)).body
        base = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"],
                "model": reply["model"]}
        chunks = [{**base, "choices": [{"index": c["index"], "delta": {"role": "assistant",
                                                                        "content": c["message"]["content"]},
                                        "finish_reason": None, "logprobs": None}]} for c in reply["choices"]]
        chunks += [{**base, "choices": [{"index": c["index"], "delta": {}, "finish_reason": c["finish_reason"],
                                         "logprobs": None}]} for c in reply["choices"]]
        chunks.append({**base, "choices": [], "usage": reply["usage"]})
        return _Chunks(chunks)

    async def count_tokens(self, body: dict[str, Any]) -> int:
        chat = messages_to_chat({k: v for k, v in body.items() if k != "thinking"})
        return self.model.count_tokens(self._chat_prompt(chat))

    async def close(self) -> None:
        return None
