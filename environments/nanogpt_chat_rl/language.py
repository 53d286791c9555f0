"""The `tiny` profile's instruction language: a small world of things, the prompts asked about
it, and the noisy "teacher" whose answers the student is pretrained on.

Host side only (the build and the judge import it; it never enters the sandbox): the world's
hidden facts (which colour each thing is) and the teacher's habits are what the judge's rubric
rewards or punishes, so an agent can learn them only by querying the judge.

Texts are lower-case words and punctuation tokens separated by single spaces, so a word-level
tokenizer (scoring/chat.py) covers them exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

CATEGORIES: dict[str, list[str]] = {
    "fruit": ["apple", "pear", "plum", "grape", "lemon", "mango", "peach", "cherry"],
    "animal": ["cat", "dog", "horse", "mouse", "tiger", "rabbit", "goat", "sheep"],
    "tool": ["hammer", "saw", "drill", "wrench", "knife", "spoon", "brush", "ladder"],
    "vehicle": ["car", "bus", "train", "boat", "bike", "truck", "plane", "tram"],
    "instrument": ["drum", "flute", "piano", "violin", "guitar", "harp", "horn", "bell"],
    "drink": ["tea", "coffee", "milk", "juice", "water", "soda", "wine", "cocoa"],
}
COLORS = ["red", "green", "blue", "yellow", "black", "white", "brown", "orange"]
NUMBERS = {"two": 2, "three": 3, "four": 4}
ITEMS = [item for items in CATEGORIES.values() for item in items]
CATEGORY_OF = {item: category for category, items in CATEGORIES.items() for item in items}

# Prompt kinds and their phrasings ({c} category, {i} item, {n} number word, {a} {b} options).
TEMPLATES: dict[str, list[str]] = {
    "name": ["name a {c} .", "give me a {c} .", "tell me one {c} ."],
    "list": ["list {n} {c} items .", "name {n} different {c} items .", "give {n} examples of {c} ."],
    "color": ["what color is the {i} ?", "tell me the color of the {i} .", "which color does the {i} have ?"],
    "choose": ["which is a {c} : {a} or {b} ?", "pick the {c} : {a} or {b} ."],
    "kind": ["what kind of thing is the {i} ?", "the {i} is what kind of thing ?"],
}
FILLER = ["and", "also", "very", "good", "thing", "maybe", "so", "it", "is", "nice"]
FUNCTION_WORDS = frozenset({"the", "a", "is", "of", "and", "or", ",", ".", "?", ":", "sure", "it", "so"})


def vocabulary() -> list[str]:
    """Every word a prompt or an answer of this language can contain (sorted, no specials)."""
    words = set(ITEMS) | set(CATEGORIES) | set(COLORS) | set(NUMBERS) | set(FILLER) | FUNCTION_WORDS
    for phrasings in TEMPLATES.values():
        for phrasing in phrasings:
            words |= {w for w in phrasing.split() if not w.startswith("{")}
    return sorted(words)


@dataclass(frozen=True)
class Prompt:
    """A prompt and what it asks (the judge re-parses the text; this is the build's view)."""

    text: str
    kind: str
    slots: dict[str, Any]


def world_colors(seed: int) -> dict[str, str]:
    """Each thing's colour: hidden facts the judge knows and the student learnt only noisily."""
    rng = random.Random(f"colors-{seed}")
    return {item: rng.choice(COLORS) for item in ITEMS}


def make_prompt(rng: random.Random) -> Prompt:
    kind = rng.choice(list(TEMPLATES))
    phrasing = rng.choice(TEMPLATES[kind])
    category = rng.choice(list(CATEGORIES))
    item = rng.choice(ITEMS)
    number = rng.choice(list(NUMBERS))
    right = rng.choice(CATEGORIES[category])
    wrong = rng.choice([x for x in ITEMS if CATEGORY_OF[x] != category])
    a, b = (right, wrong) if rng.random() < 0.5 else (wrong, right)
    text = phrasing.format(c=category, i=item, n=number, a=a, b=b)
    slots = {"category": category, "item": item, "n": NUMBERS[number], "right": right, "wrong": wrong}
    return Prompt(text, kind, slots)


def prompts(n: int, seed: int, exclude: set[str] | None = None, unique: bool = False) -> list[Prompt]:
    """`n` seeded prompts, none of whose texts is in `exclude`, all different with `unique`
    (as far as the language has enough of them)."""
    rng = random.Random(f"prompts-{seed}")
    out: list[Prompt] = []
    seen = set(exclude or ())
    tries = 0
    while len(out) < n:
        prompt = make_prompt(rng)
        tries += 1
        if prompt.text in seen and tries < 50 * n:
            continue
        if unique:
            seen.add(prompt.text)
        out.append(prompt)
    return out


def _content(prompt: Prompt, colors: dict[str, str], rng: random.Random, correct: bool) -> list[str]:
    s = prompt.slots
    category, item = s["category"], s["item"]
    if prompt.kind == "name":
        pick = rng.choice(CATEGORIES[category]) if correct else rng.choice(ITEMS)
        return [pick, "is", "a", category]
    if prompt.kind == "list":
        count = s["n"] if correct or rng.random() < 0.5 else rng.choice([1, 2, 3, 4, 5])
        pool = CATEGORIES[category] if correct else ITEMS
        picks = rng.sample(pool, count) if correct else [rng.choice(pool) for _ in range(count)]
        words: list[str] = []
        for pick in picks:
            words += [pick, ","]
        return words[:-1]
    if prompt.kind == "color":
        return ["the", item, "is", colors[item] if correct else rng.choice(COLORS)]
    if prompt.kind == "choose":
        pick = s["right"] if correct else s["wrong"]
        return ["the", pick, "is", "a", category]
    return ["the", item, "is", "a", CATEGORY_OF[item] if correct else rng.choice(list(CATEGORIES))]


def teacher_answer(prompt: Prompt, colors: dict[str, str], rng: random.Random) -> str:
    """One answer of the noisy teacher the student imitates: right only sometimes, with habits
    (a polite opening, the final period, rambling, echoing the prompt, repeating itself) the
    judge's rubric weighs; its rates are the student's starting point."""
    words = _content(prompt, colors, rng, correct=rng.random() < 0.3)
    if rng.random() < 0.1:
        words = [*words, "and", *words]
    if rng.random() < 0.2:
        words += ["and"] + [rng.choice(FILLER + ITEMS) for _ in range(rng.randint(3, 12))]
    if rng.random() < 0.1:
        words = prompt.text.split() + words
    if rng.random() < 0.6:
        words.append(".")
    if rng.random() < 0.25:
        words = ["sure", ",", *words]
    return " ".join(words)


def world(seed: int) -> dict[str, Any]:
    """What the judge needs to know (written to the build's judge folder, never to the sandbox)."""
    return {"seed": seed, "categories": CATEGORIES, "colors": world_colors(seed), "numbers": NUMBERS}
