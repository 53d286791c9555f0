"""A scripted model server on 127.0.0.1 speaking OpenAI Chat Completions and Responses and Anthropic
Messages (with count_tokens), whole or streamed as server-sent events (tests/fake_model_streams.py).

Tests point the real `openai` and `anthropic` SDK clients at it (no network).
The script is a list of steps answered in order, whichever API asks:

    {"text": "...", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}],
     "usage": {"input_tokens": 100, "output_tokens": 20, "cached_tokens": 10}, "delay_s": 0.2}
    {"status": 429, "retry_after": 1}          # an error reply (not a completion)
    {"text": "a b c", "cut_after": 3, "cut": "stall"}   # streamed: 3 events, then nothing (see fake_model_streams)

Usage is optional (estimated from sizes when absent; `"generate_max": true` reports the request's
max_tokens times n output tokens, a provider that writes all it may); `"truncated": true` plays
a reply cut off at the output-token limit. Requests are checked the
way the real APIs check them (tool results must answer tool calls, Anthropic
turns must alternate), so a malformed conversation fails here as it would there.
When the script runs out, the server answers with text and no tool call.

From the command line (for trying `rebench run` by hand):

    python tests/fake_model_server.py --port 8765 --script script.json
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

try:
    from tests.fake_model_checks import check_anthropic, check_openai, check_responses
    from tests.fake_model_streams import anthropic_events, encode, openai_events, render_responses, responses_events
except ImportError:  # run as a script: python tests/fake_model_server.py
    from fake_model_checks import check_anthropic, check_openai, check_responses  # type: ignore[no-redef]
    from fake_model_streams import (  # type: ignore[no-redef]
        anthropic_events,
        encode,
        openai_events,
        render_responses,
        responses_events,
    )

EXHAUSTED_TEXT = "(fake model server: script exhausted)"
CONTEXT_ERROR = "prompt is too long: maximum context length exceeded"


class RecordedRequest:
    """One request as the server saw it, for tests to inspect."""

    def __init__(self, api: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        self.api = api
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        """All text the model was shown in this request (system, messages, tool results)."""
        return _shown(self.body)


class FakeModelServer:
    """Start with `start()` (or as a context manager); `url` is the base address."""

    def __init__(
        self,
        steps: Iterable[dict[str, Any]] = (),
        *,
        port: int = 0,
        require_key: str | None = None,
        max_prompt_chars: int | None = None,
        repeat: bool = False,
        aside: Callable[[str, dict[str, Any]], dict[str, Any] | None] | None = None,
    ) -> None:
        self.steps: list[dict[str, Any]] = list(steps)
        self.aside = aside
        """Answers a request off the script when it returns a step (a real agent's side calls, e.g. a
        title or a probe without tools), so the script stays the episode."""
        self.repeat = repeat
        """Answer with the script's steps over and over (benchmarks) instead of running out."""
        self.require_key = require_key
        self.max_prompt_chars = max_prompt_chars
        self.requests: list[RecordedRequest] = []
        self.answered = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL for Anthropic; OpenAI clients use `openai_url`."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    def add(self, *steps: dict[str, Any]) -> None:
        with self._lock:
            self.steps.extend(steps)

    def start(self) -> FakeModelServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_step(self) -> dict[str, Any] | None:
        with self._lock:
            if self.answered < len(self.steps) or (self.repeat and self.steps):
                step = self.steps[self.answered % len(self.steps)]
                self.answered += 1
                return step
            self.answered += 1
            return None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # a reply's head and body go out at once, as a real server's do

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                path = self.path.split("?")[0].rstrip("/")
                if path.endswith("/chat/completions"):
                    api = "openai"
                elif path.endswith("/responses"):
                    api = "responses"
                elif path.endswith("/messages/count_tokens"):
                    api = "count_tokens"
                elif path.endswith("/messages"):
                    api = "anthropic"
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._error(api, 400, "body is not JSON")
                    return
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    server.requests.append(RecordedRequest(api, headers, body))
                if server.require_key is not None:
                    given = headers.get("x-api-key") or headers.get("authorization", "").removeprefix(
                        "Bearer "
                    )
                    if given != server.require_key:
                        self._error(api, 401, "invalid api key")
                        return
                if api == "count_tokens":
                    self._send(200, {"input_tokens": len(_shown(body)) // 4 + 1})
                    return
                check = {"openai": check_openai, "responses": check_responses}.get(api, check_anthropic)
                problem = check(body)
                if problem:
                    self._error(api, 400, problem)
                    return
                if server.max_prompt_chars is not None:
                    size = len(json.dumps(body.get("messages", [])))
                    if size > server.max_prompt_chars:
                        self._error(api, 400, f"{CONTEXT_ERROR} ({size} > {server.max_prompt_chars} chars)")
                        return
                step = server.aside(api, body) if server.aside is not None else None
                step = step if step is not None else server._next_step()
                if step is None:
                    step = {"text": EXHAUSTED_TEXT}
                if step.get("delay_s"):
                    time.sleep(float(step["delay_s"]))
                if "status" in step:
                    extra = {}
                    if "retry_after" in step:
                        extra["retry-after"] = str(step["retry_after"])
                    self._error(api, int(step["status"]), str(step.get("error", "scripted error")), extra)
                    return
                if body.get("stream"):
                    self._stream(stream_events(api, step, body, server.answered), step)
                    return
                render = {"openai": render_openai, "responses": _render_responses}.get(api, render_anthropic)
                self._send(200, render(step, body, server.answered))

            def _stream(self, events: list[tuple[str | None, str]], step: dict[str, Any]) -> None:
                """Chunked transfer encoding, one chunk an event, flushed at once; a step may cut it."""
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                cut_after = step.get("cut_after")
                for i, (name, data) in enumerate(events):
                    if cut_after is not None and i >= int(cut_after):
                        if step.get("cut") == "stall":
                            time.sleep(float(step.get("stall_s", 30)))
                        self.close_connection = True  # the body ends without its last chunk
                        return
                    payload = encode(name, data)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
                    self.wfile.flush()
                    if step.get("chunk_delay_s"):
                        time.sleep(float(step["chunk_delay_s"]))
                self.wfile.write(b"0\r\n\r\n")

            def _error(
                self, api: str, status: int, message: str, headers: dict[str, str] | None = None
            ) -> None:
                kind = {
                    429: "rate_limit_error",
                    401: "authentication_error",
                    400: "invalid_request_error",
                }.get(status, "api_error")
                if api in ("anthropic", "count_tokens"):
                    payload: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
                else:
                    payload = {"error": {"message": message, "type": kind, "code": None, "param": None}}
                self._send(status, payload, headers)

            def _send(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _shown(body: dict[str, Any]) -> str:
    """All text a request shows the model, in any of the three APIs."""
    return "".join(json.dumps(body[k]) for k in ("system", "messages", "instructions", "input") if k in body) or '""'


def _usage(step: dict[str, Any], body: dict[str, Any]) -> tuple[int, int, int]:
    usage = step.get("usage", {})
    shown = _shown(body)
    said = step.get("text", "") + json.dumps(step.get("tool_calls", []))
    output = len(said) // 4 + 1
    if step.get("generate_max"):  # a provider that writes all it is allowed to, for every sample asked
        allowed = (body.get("max_completion_tokens") or body.get("max_tokens") or body.get("max_output_tokens")
                   or 100_000)
        output = int(allowed) * int(body.get("n") or 1)
    return (
        int(usage.get("input_tokens", len(shown) // 4 + 1)),
        int(usage.get("output_tokens", output)),
        int(usage.get("cached_tokens", 0)),
    )


def _stop(step: dict[str, Any], default: str) -> str:
    """`"truncated": true` in a step plays a reply cut off at the output-token limit."""
    if not step.get("truncated"):
        return default
    return "max_tokens" if default in ("tool_use", "end_turn") else "length"


def _render_responses(step: dict[str, Any], body: dict[str, Any], n: int) -> dict[str, Any]:
    return render_responses(step, body, n, _usage(step, body))


def stream_events(api: str, step: dict[str, Any], body: dict[str, Any], n: int) -> list[tuple[str | None, str]]:
    """The events of a streamed answer to `body`, as the provider of `api` writes them."""
    usage = _usage(step, body)
    if api == "openai":
        return openai_events(step, body, n, usage, _stop(step, "tool_calls" if step.get("tool_calls") else "stop"))
    if api == "responses":
        return responses_events(step, body, n, usage)
    return anthropic_events(step, body, n, usage, _stop(step, "tool_use" if step.get("tool_calls") else "end_turn"))


def render_openai(step: dict[str, Any], body: dict[str, Any], n: int) -> dict[str, Any]:
    prompt, completion, cached = _usage(step, body)
    message: dict[str, Any] = {"role": "assistant", "content": step.get("text") or None}
    calls = step.get("tool_calls", [])
    if calls:
        message["tool_calls"] = [
            {
                "id": call.get("id", f"call_{n}_{i}"),
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": call.get("raw_arguments", json.dumps(call.get("arguments", {}))),
                },
            }
            for i, call in enumerate(calls)
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "scripted"),
        "choices": [
            {"index": 0, "message": message, "finish_reason": _stop(step, "tool_calls" if calls else "stop")}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


def render_anthropic(step: dict[str, Any], body: dict[str, Any], n: int) -> dict[str, Any]:
    prompt, completion, cached = _usage(step, body)
    content: list[dict[str, Any]] = []
    if step.get("text"):
        content.append({"type": "text", "text": step["text"]})
    calls = step.get("tool_calls", [])
    content.extend(
        {
            "type": "tool_use",
            "id": call.get("id", f"toolu_{n}_{i}"),
            "name": call["name"],
            "input": call.get("arguments", {}),
        }
        for i, call in enumerate(calls)
    )
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": content,
        "stop_reason": _stop(step, "tool_use" if calls else "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": prompt - cached,
            "output_tokens": completion,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", required=True, help="JSON file: a list of steps, or {'steps': [...]}")
    parser.add_argument("--require-key", default=None, help="answer 401 unless this key is sent")
    parser.add_argument("--repeat", action="store_true", help="repeat the script's steps forever")
    args = parser.parse_args()
    with open(args.script) as handle:
        loaded = json.load(handle)
    steps = loaded["steps"] if isinstance(loaded, dict) else loaded
    server = FakeModelServer(steps, port=args.port, require_key=args.require_key, repeat=args.repeat)
    print(
        f"fake model server on {server.url} (OpenAI base URL {server.openai_url}), {len(steps)} steps",
        flush=True,
    )
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()


if __name__ == "__main__":
    main()
