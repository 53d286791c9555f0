"""The judge, reachable only through the harness's model gateway: `evaluate(prompts, pairs, max_workers)`.

    from evaluation import evaluate
    first_preferred = evaluate(["name a fruit ."], [("apple is a fruit .", "dog")], max_workers=8)

Each (prompt, (first, second)) becomes one chat request to the judge model named in api.env
(`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `REBENCH_GATEWAY_MODEL`); the answer is True when the judge
prefers the first response. Identical responses are not sent: the first counts as preferred.
Requests are metered on your key (count, tokens, notional cost: `rebench attempts show`).
The scorer uses this same file (its own copy) with its own key.

Standard library only. A request that fails is retried (3 tries); then `JudgeError`.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TEMPLATE = ("You compare two responses to an instruction. Reply with 1 if the first response is the better one, "
            "or 2 if the second is.\n\n### Instruction:\n{prompt}\n### Response 1:\n{first}\n### Response 2:\n"
            "{second}\n### Better response (1 or 2):")
TRIES = 3


class JudgeError(RuntimeError):
    """The judge could not be asked (the gateway refused or failed), or answered neither 1 nor 2."""


def read_env_file(path: str | Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def gateway_settings(api_env: str | Path | None = None) -> dict[str, str]:
    """Base URL, key and model: from `api_env`, else ~/api.env, else the environment's variables."""
    candidates = [Path(api_env)] if api_env else [Path.home() / "api.env", Path(__file__).resolve().parent / "api.env"]
    for path in candidates:
        if path.is_file():
            return read_env_file(path)
    if os.environ.get("OPENAI_BASE_URL") and os.environ.get("OPENAI_API_KEY"):
        return {key: os.environ.get(key, "") for key in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "REBENCH_GATEWAY_MODEL")}
    raise JudgeError(f"no api.env found (tried {', '.join(map(str, candidates))}); pass api_env=PATH")


def _ask(settings: dict[str, str], prompt: str, first: str, second: str, timeout_s: float) -> bool:
    body = {"model": settings.get("REBENCH_GATEWAY_MODEL", ""), "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": TEMPLATE.format(prompt=prompt, first=first, second=second)}]}
    request = urllib.request.Request(settings["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {settings['OPENAI_API_KEY']}",
                                              "Content-Type": "application/json"})
    error = ""
    for attempt in range(TRIES):
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                reply = json.loads(response.read())
            text = str(reply["choices"][0]["message"]["content"] or "").strip()
            if text[:1] in ("1", "2"):
                return text[:1] == "1"
            error = f"the judge answered {text[:60]!r}, not 1 or 2"
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}: {exc.read()[:200].decode(errors='replace')}"
            if exc.code in (400, 401, 404, 429):  # refusals: asking again changes nothing
                break
        except (OSError, ValueError, KeyError, IndexError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        time.sleep(0.2 * (attempt + 1))
    raise JudgeError(error)


def evaluate(prompts: Sequence[str], pairs: Sequence[tuple[str, str]], max_workers: int = 8, *,
             api_env: str | Path | None = None, timeout_s: float = 120.0) -> list[bool]:
    """For each prompt and its (first, second) pair of responses: does the judge prefer the first?"""
    if len(prompts) != len(pairs):
        raise ValueError(f"{len(prompts)} prompts but {len(pairs)} pairs")
    settings = gateway_settings(api_env)

    def one(index: int) -> bool:
        first, second = pairs[index]
        if first == second:
            return True
        return _ask(settings, prompts[index], first, second, timeout_s)

    with ThreadPoolExecutor(max(1, int(max_workers))) as pool:
        return list(pool.map(one, range(len(prompts))))
