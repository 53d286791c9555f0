"""A stand-in for the model a `paper` profile's gateway forwards to (OpenAI's gpt-3.5-turbo for the
Rust task, the operator's Llama-3 judge for GPT-2 QA): an OpenAI-compatible server on 127.0.0.1 that
answers each chat completion with a scripted text. The harness's real gateway sits between it and
the sandbox, so the scorer's requests take the path they take against the real model; no network.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

Answer = Callable[[dict[str, Any]], str]
"""The reply's text for a request body (its `messages`, `model`, ...)."""


class StandInModel:
    """Serves POST .../chat/completions with `answer(body)` in each of the `n` choices asked for;
    keeps each request's body (`bodies`), so a test can check what the scorer sent."""

    def __init__(self, answer: Answer) -> None:
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                outer.bodies.append(body)
                text = answer(body)
                choices = [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                           for i in range(int(body.get("n") or 1))]
                reply = json.dumps({"id": f"standin-{outer.requests}", "object": "chat.completion", "created": 0,
                                    "model": body.get("model", "standin"), "choices": choices,
                                    "usage": {"prompt_tokens": 100, "completion_tokens": 20 * len(choices),
                                              "total_tokens": 100 + 20 * len(choices)}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def requests(self) -> int:
        return len(self.bodies)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> StandInModel:
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()


def last_user_text(body: dict[str, Any]) -> str:
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content", "")
    return content if isinstance(content, str) else json.dumps(content)
