"""The judge, reachable only through the harness's model gateway: `evaluate(prompts, pairs, max_workers)`.

    from evaluation import evaluate
    first_preferred = evaluate(["name a fruit ."], [("apple is a fruit .", "dog")], max_workers=8)

Each (prompt, (first, second)) becomes one chat request to the judge model named in api.env
(`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `REBENCH_GATEWAY_MODEL`), built the way AlpacaEval's
`alpaca_eval_llama3_70b_fn` annotator builds its requests, which is the annotator METR's task took
its judge prompt from: that annotator's prompt template (a system and a user message), its
temperature and token limit, and its ranking parser (the answer read as a Python literal, a list of
{'model', 'rank'}; the rank of model_1 decides). The build copies the template and those settings
from the alpaca-eval package into the home folder (`annotator/`: annotator.json and the template
file); every profile's judge, and the scorer, get requests of exactly this shape.

As in METR's evaluation, a coin decides for each pair which response the judge sees as model_1, so
a judge's position bias falls on both responses alike (pass `seed` for the same coins every time);
the answer is True when the judge ranks the first response of the pair best. An answer the parser
cannot read counts as False (METR's evaluation counted it so); `verdicts()` returns None for it
instead. Identical responses are not sent: the first counts as preferred.

Requests are metered on your key (count, tokens, notional cost: `rebench attempts show`). The
scorer uses this same file (its own copy), the same annotator files (its own copy) and its own key.

Standard library only. A request that fails is retried (3 tries); then `JudgeError`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import re
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ANNOTATOR_FILE = "annotator.json"
PLACEHOLDERS = ("instruction", "output_1", "output_2")
PARSER = "ranking_parser"
TRIES = 3
_START, _END = "<|im_start|>", "<|im_end|>"
_FIELD = re.compile(r"{([^ \s]+?)}")  # how AlpacaEval finds a template's placeholders


class JudgeError(RuntimeError):
    """The judge could not be asked (the gateway refused or failed)."""


class AnnotatorError(ValueError):
    """The annotator files are missing or not of the shape this file implements."""


@dataclass(frozen=True)
class Annotator:
    """The judge's request: (role, content template) messages and the decoding settings."""

    name: str
    messages: tuple[tuple[str, str], ...]
    temperature: float
    max_tokens: int

    def request(self, model: str, instruction: str, output_1: str, output_2: str) -> dict[str, Any]:
        """The chat request body for one pair, model_1 answering `output_1`."""
        values = {"instruction": instruction, "output_1": output_1, "output_2": output_2}

        def fill(content: str) -> str:  # one pass: text put in is never searched again
            return _FIELD.sub(lambda found: values.get(found.group(1), found.group(0)), content)

        return {"model": model, "temperature": self.temperature, "max_tokens": self.max_tokens,
                "messages": [{"role": role, "content": fill(content)} for role, content in self.messages]}


def template_messages(template: str) -> list[tuple[str, str]]:
    """AlpacaEval's chat-ML text (`<|im_start|>ROLE\\nCONTENT\\n<|im_end|>` ...) as (role, content)
    pairs, split and stripped as its `prompt_to_chatml` splits them. The template is split before
    its placeholders are filled, so a response that contains those markers stays inside its message."""
    text = template.strip()
    if not (text.startswith(_START) and text.endswith(_END)):
        raise AnnotatorError(f"the prompt template is not in chat-ML form ({_START} ... {_END})")
    messages = []
    for part in text.split(_START)[1:]:
        head, _, rest = part.partition("\n")
        role = head.strip()
        if role not in ("system", "user", "assistant"):
            raise AnnotatorError(f"the prompt template has a message of role {role!r}; allowed: system, user, "
                                 "assistant")
        messages.append((role, rest.split(_END, 1)[0].strip()))
    return messages


def annotator_dir(given: str | Path | None = None) -> Path:
    """`given`, else the home folder's annotator/ (the build puts it there)."""
    candidates = [Path(given)] if given else [Path.home() / "annotator",
                                              Path(__file__).resolve().parent.parent / "annotator"]
    for path in candidates:
        if (path / ANNOTATOR_FILE).is_file():
            return path
    raise AnnotatorError(f"no {ANNOTATOR_FILE} found (tried {', '.join(map(str, candidates))}); "
                         "pass annotator_dir=PATH")


def load_annotator(folder: str | Path | None = None) -> Annotator:
    """The annotator the build wrote (annotator.json and its prompt template), checked."""
    folder = annotator_dir(folder)
    settings = json.loads((folder / ANNOTATOR_FILE).read_text(encoding="utf-8"))
    if settings.get("fn_completion_parser") != PARSER or settings.get("completion_parser_kwargs"):
        raise AnnotatorError(f"parser {settings.get('fn_completion_parser')!r} with "
                             f"{settings.get('completion_parser_kwargs')!r}; implemented: {PARSER} without arguments")
    if settings.get("batch_size", 1) != 1 or settings.get("requires_chatml") is not True:
        raise AnnotatorError("the annotator must take one pair per request (batch_size 1) as chat messages")
    template = (folder / str(settings["prompt_template"])).read_bytes()
    if hashlib.sha256(template).hexdigest() != settings.get("template_sha256"):
        raise AnnotatorError(f"{settings['prompt_template']} is not the template the build copied (sha256 differs)")
    text = template.decode("utf-8")
    fields = _FIELD.findall(text)
    if sorted(fields) != sorted(PLACEHOLDERS):
        raise AnnotatorError(f"the template's placeholders are {fields}; expected each of {list(PLACEHOLDERS)} once")
    temperature, max_tokens = settings.get("temperature"), settings.get("max_tokens")
    if not isinstance(temperature, int | float) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise AnnotatorError(f"temperature {temperature!r} and max_tokens {max_tokens!r} must be numbers")
    return Annotator(name=str(settings["annotator"]), messages=tuple(template_messages(text)),
                     temperature=temperature, max_tokens=max_tokens)  # as configured (AlpacaEval sends 0, not 0.0)


def ranking_parser(completion: str, model_1_name: str = "model_1") -> int | None:
    """The rank (1 or 2) the judge gave model_1, read as AlpacaEval's `ranking_parser` reads it: the
    whole answer as a Python literal, a list of {'model': ..., 'rank': ...}; None where that fails
    (AlpacaEval's NaN)."""
    if not completion:
        return None
    try:
        ranking = ast.literal_eval(completion)
        # every entry is read, as AlpacaEval reads them (one without "model" makes the answer unreadable)
        rank = [entry for entry in ranking if entry["model"] == model_1_name][0]["rank"]  # noqa: RUF015
    except Exception:  # anything unreadable, as AlpacaEval: no answer
        return None
    return int(rank) if rank in (1, 2) else None


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


def _ask(settings: dict[str, str], body: dict[str, Any], timeout_s: float) -> str:
    """The judge's answer text to one request."""
    request = urllib.request.Request(settings["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {settings['OPENAI_API_KEY']}",
                                              "Content-Type": "application/json"})
    error = ""
    for attempt in range(TRIES):
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                reply = json.loads(response.read())
            return str(reply["choices"][0]["message"]["content"] or "")
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}: {exc.read()[:200].decode(errors='replace')}"
            if exc.code in (400, 401, 404, 429):  # refusals: asking again changes nothing
                break
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        time.sleep(0.2 * (attempt + 1))
    raise JudgeError(error)


def verdicts(prompts: Sequence[str], pairs: Sequence[tuple[str, str]], max_workers: int = 8, *,
             api_env: str | Path | None = None, annotator_dir: str | Path | None = None,
             timeout_s: float = 120.0, seed: int | str | None = None) -> list[bool | None]:
    """For each prompt and its (first, second) pair: True when the judge ranks the first best, False
    when it ranks the second best, None when its answer cannot be read."""
    if len(prompts) != len(pairs):
        raise ValueError(f"{len(prompts)} prompts but {len(pairs)} pairs")
    settings = gateway_settings(api_env)
    annotator = load_annotator(annotator_dir)
    coins = random.Random(seed)
    swapped = [coins.random() < 0.5 for _ in prompts]  # drawn up front: the same seed, the same coins

    def one(index: int) -> bool | None:
        first, second = pairs[index]
        if first == second:
            return True
        output_1, output_2 = (second, first) if swapped[index] else (first, second)
        body = annotator.request(settings.get("REBENCH_GATEWAY_MODEL", ""), prompts[index], output_1, output_2)
        rank = ranking_parser(_ask(settings, body, timeout_s))
        return None if rank is None else (rank == 1) != swapped[index]

    with ThreadPoolExecutor(max(1, int(max_workers))) as pool:
        return list(pool.map(one, range(len(prompts))))


def evaluate(prompts: Sequence[str], pairs: Sequence[tuple[str, str]], max_workers: int = 8, *,
             api_env: str | Path | None = None, annotator_dir: str | Path | None = None,
             timeout_s: float = 120.0, seed: int | str | None = None) -> list[bool]:
    """For each prompt and its (first, second) pair of responses: does the judge prefer the first?
    (An unreadable answer: no.)"""
    return [verdict is True for verdict in verdicts(prompts, pairs, max_workers, api_env=api_env,
                                                    annotator_dir=annotator_dir, timeout_s=timeout_s, seed=seed)]
