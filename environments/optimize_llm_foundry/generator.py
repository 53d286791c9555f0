"""The tiny profiles' training rows: seeded instruction/response pairs in a small word language.

Each row is `{"prompt": ..., "response": ...}` (LLM Foundry's finetuning format): a task word, a
colon and a few words; the response applies the task to them (reverse, sort, copy, count, last,
first). The vocabulary is fixed, so one word-level tokenizer covers every row of every seed: the
agent's file and the scorer's hidden one come from the same distribution with different seeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

TASKS = ("reverse", "sort", "copy", "count", "last", "first")
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")


def words(n: int = 160) -> list[str]:
    """`n` distinct two-syllable words, the same on every machine."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    syllables = [c + v for c in consonants for v in vowels]
    rng = np.random.Generator(np.random.PCG64(2024))
    pairs = rng.choice(len(syllables) ** 2, size=n, replace=False)
    return [syllables[int(p) // len(syllables)] + syllables[int(p) % len(syllables)] for p in pairs]


def vocabulary() -> list[str]:
    """Every token: specials first (ids 0-3), then task words, ':', numbers 0-20 and the words."""
    return [*SPECIALS, *TASKS, ":", *(str(i) for i in range(21)), *words()]


def row(rng: np.random.Generator, lexicon: list[str], max_words: int) -> dict[str, str]:
    task = TASKS[int(rng.integers(len(TASKS)))]
    picked = [lexicon[int(i)] for i in rng.integers(len(lexicon), size=int(rng.integers(3, max_words + 1)))]
    answer = {"reverse": picked[::-1], "sort": sorted(picked), "copy": picked, "count": [str(len(picked))],
              "last": picked[-1:], "first": picked[:1]}[task]
    return {"prompt": f"{task} : {' '.join(picked)}", "response": " ".join(answer)}


def generate(n_rows: int, seed: int, max_words: int = 12) -> list[dict[str, str]]:
    rng = np.random.Generator(np.random.PCG64(seed))
    lexicon = words()
    return [row(rng, lexicon, max_words) for _ in range(n_rows)]


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for item in rows:
            handle.write(json.dumps(item) + "\n")
