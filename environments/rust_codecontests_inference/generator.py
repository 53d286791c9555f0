"""Seeded generator of small stdin/stdout programming problems in CodeContests' shape.

`generate(split, n, seed)` returns problems as dicts with the fields the environment uses
(`name`, `description`, `public_tests`, `private_tests`, `generated_tests`, `solution`), where
`solution` is a correct Rust 2018 program. Every problem is one *task* (a family of input
shape, an operation, its constants, the wording of the statement and its opening sentence);
the task's key is hashed into a split, so the model's training problems ("train") share no
task, hence no description, with the validation or hidden problems.

The operations themselves are split too: the validation problems ("valid", which the agent
sees) use only the operations of `VISIBLE_OPS`, the hidden problems ("test") only the others,
and the model trains on all of them. A scaffold that writes the programs itself from the
statements it saw in the validation split (their templates, the operations behind them) has
nothing to match on the hidden split; the model, trained on every operation with other
constants and combinations, still reads the hidden statements. Names are random ids: they say
nothing about the operation.

Standard library only: build.py and the model's training import it.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SPLITS = ("train", "valid", "test")
# Share of the task space per split, by the task key's hash (percent buckets).
_BUCKETS = {"train": range(0, 70), "valid": range(70, 85), "test": range(85, 100)}

Inputs = list[Any]


@dataclass(frozen=True)
class Op:
    """One operation of a family: statement wordings, the Rust expression, a Python oracle."""

    family: str
    name: str
    wordings: tuple[str, ...]  # format fields: {k}, {b}, {c}
    rust: str  # Rust code for the answer, format fields as in wordings
    oracle: Callable[..., str]  # (input values, k, b, c) -> printed answer (without newline)
    consts: str = ""  # which constants the op uses: letters of "kbc"
    output: str = "Print the answer."
    nonneg: bool = False  # inputs must be >= 0 (division and remainder agree in Rust and Python)


def _yes(flag: bool) -> str:
    return "YES" if flag else "NO"


def _join(values: list[int]) -> str:
    return " ".join(str(v) for v in values)


_OPS: list[Op] = [
    # ---- two integers a b
    Op("pair", "add", ("Print the sum of a and b.", "Compute a + b.", "Find the total of the two numbers."),
       "a + b", lambda v, k, b, c: str(v[0] + v[1])),
    Op("pair", "sub", ("Print a minus b.", "Compute a - b.", "Subtract the second number from the first one."),
       "a - b", lambda v, k, b, c: str(v[0] - v[1])),
    Op("pair", "mul", ("Print the product of a and b.", "Compute a * b.", "Multiply the two numbers."),
       "a * b", lambda v, k, b, c: str(v[0] * v[1])),
    Op("pair", "max", ("Print the larger of the two numbers.", "Print the maximum of a and b."),
       "a.max(b)", lambda v, k, b, c: str(max(v))),
    Op("pair", "min", ("Print the smaller of the two numbers.", "Print the minimum of a and b."),
       "a.min(b)", lambda v, k, b, c: str(min(v))),
    Op("pair", "absdiff", ("Print the absolute difference of a and b.", "Print |a - b|."),
       "(a - b).abs()", lambda v, k, b, c: str(abs(v[0] - v[1]))),
    Op("pair", "lin", ("Print a * {k} + b.", "Multiply the first number by {k} and add the second one."),
       "a * {k} + b", lambda v, k, b, c: str(v[0] * k + v[1]), consts="k"),
    Op("pair", "summod", ("Print (a + b) modulo {k}.", "Print the remainder of a + b divided by {k}."),
       "(a + b) % {k}", lambda v, k, b, c: str((v[0] + v[1]) % k), consts="k", nonneg=True),
    # ---- one integer x
    Op("single", "affine", ("Print x * {k} + {b}.", "Multiply x by {k}, then add {b}.", "Print {k} times x plus {b}."),
       "x * {k} + {b}", lambda v, k, b, c: str(v[0] * k + b), consts="kb"),
    Op("single", "affsub", ("Print x * {k} - {b}.", "Multiply x by {k}, then subtract {b}."),
       "x * {k} - {b}", lambda v, k, b, c: str(v[0] * k - b), consts="kb"),
    Op("single", "mod", ("Print the remainder of x divided by {k}.", "Print x modulo {k}."),
       "x % {k}", lambda v, k, b, c: str(v[0] % k), consts="k", nonneg=True),
    Op("single", "div", ("Print x divided by {k}, rounded down.", "Print the integer part of x / {k}."),
       "x / {k}", lambda v, k, b, c: str(v[0] // k), consts="k", nonneg=True),
    Op("single", "square", ("Print the square of x.", "Print x * x."),
       "x * x", lambda v, k, b, c: str(v[0] * v[0])),
    Op("single", "tri", ("Print the sum 1 + 2 + ... + x.", "Print the sum of all integers from 1 to x."),
       "x * (x + 1) / 2", lambda v, k, b, c: str(v[0] * (v[0] + 1) // 2), nonneg=True),
    Op("single", "divisible", ("Is x divisible by {k}?", "Check whether x is a multiple of {k}."),
       'if x % {k} == 0 {{ "YES" }} else {{ "NO" }}', lambda v, k, b, c: _yes(v[0] % k == 0),
       consts="k", output="Print YES if it is, and NO otherwise."),
    # ---- n, then n integers; one number answer
    Op("array", "sum", ("Print the sum of the numbers.", "Find the sum of all elements."),
       "v.iter().sum()", lambda v, k, b, c: str(sum(v))),
    Op("array", "max", ("Print the largest element.", "Find the maximum of the array."),
       "*v.iter().max().unwrap()", lambda v, k, b, c: str(max(v))),
    Op("array", "min", ("Print the smallest element.", "Find the minimum of the array."),
       "*v.iter().min().unwrap()", lambda v, k, b, c: str(min(v))),
    Op("array", "range", ("Print the difference between the largest and the smallest element.",
                          "Print the maximum minus the minimum."),
       "*v.iter().max().unwrap() - *v.iter().min().unwrap()", lambda v, k, b, c: str(max(v) - min(v))),
    Op("array", "countgt", ("Count the elements greater than {k}.", "How many numbers are larger than {k}?"),
       "v.iter().filter(|&&x| x > {k}).count() as i64", lambda v, k, b, c: str(sum(x > k for x in v)), consts="k"),
    Op("array", "countlt", ("Count the elements less than {k}.", "How many numbers are smaller than {k}?"),
       "v.iter().filter(|&&x| x < {k}).count() as i64", lambda v, k, b, c: str(sum(x < k for x in v)), consts="k"),
    Op("array", "counteq", ("Count the elements equal to {k}.", "How many times does {k} appear?"),
       "v.iter().filter(|&&x| x == {k}).count() as i64", lambda v, k, b, c: str(v.count(k)), consts="k"),
    Op("array", "countdiv", ("Count the elements divisible by {k}.", "How many numbers are multiples of {k}?"),
       "v.iter().filter(|&&x| x % {k} == 0).count() as i64", lambda v, k, b, c: str(sum(x % k == 0 for x in v)),
       consts="k"),
    Op("array", "sumgt", ("Print the sum of the elements greater than {k}.", "Add up the numbers larger than {k}."),
       "v.iter().filter(|&&x| x > {k}).sum()", lambda v, k, b, c: str(sum(x for x in v if x > k)), consts="k"),
    Op("array", "sumsq", ("Print the sum of the squares of the elements.", "Find the sum of x * x over the array."),
       "v.iter().map(|x| x * x).sum()", lambda v, k, b, c: str(sum(x * x for x in v))),
    Op("array", "sumk", ("Print the sum of the elements multiplied by {k}.", "Print {k} times the total."),
       "v.iter().sum::<i64>() * {k}", lambda v, k, b, c: str(sum(v) * k), consts="k"),
    Op("array", "even", ("Count the even elements.", "How many numbers are even?"),
       "v.iter().filter(|&&x| x % 2 == 0).count() as i64", lambda v, k, b, c: str(sum(x % 2 == 0 for x in v))),
    Op("array", "odd", ("Count the odd elements.", "How many numbers are odd?"),
       "v.iter().filter(|&&x| x % 2 != 0).count() as i64", lambda v, k, b, c: str(sum(x % 2 != 0 for x in v))),
    # ---- n, then n integers; print a transformed array
    Op("map", "addk", ("Add {k} to every element and print the array.", "Increase each number by {k}."),
       "v.iter().map(|x| (x + {k}).to_string()).collect()", lambda v, k, b, c: _join([x + k for x in v]),
       consts="k", output="Print the resulting numbers separated by spaces."),
    Op("map", "subk", ("Subtract {k} from every element and print the array.", "Decrease each number by {k}."),
       "v.iter().map(|x| (x - {k}).to_string()).collect()", lambda v, k, b, c: _join([x - k for x in v]),
       consts="k", output="Print the resulting numbers separated by spaces."),
    Op("map", "mulk", ("Multiply every element by {k} and print the array.", "Print each number times {k}."),
       "v.iter().map(|x| (x * {k}).to_string()).collect()", lambda v, k, b, c: _join([x * k for x in v]),
       consts="k", output="Print the resulting numbers separated by spaces."),
    Op("map", "rev", ("Print the array in reverse order.", "Reverse the array."),
       "v.iter().rev().map(|x| x.to_string()).collect()", lambda v, k, b, c: _join(v[::-1]),
       output="Print the numbers separated by spaces."),
    # ---- one lowercase word s
    Op("string", "len", ("Print the length of s.", "How many letters does the word have?"),
       "s.len()", lambda v, k, b, c: str(len(v[0]))),
    Op("string", "rev", ("Print s reversed.", "Print the word written backwards."),
       "s.chars().rev().collect::<String>()", lambda v, k, b, c: v[0][::-1]),
    Op("string", "upper", ("Print s in uppercase.", "Print the word in capital letters."),
       "s.to_uppercase()", lambda v, k, b, c: v[0].upper()),
    Op("string", "countc",
       ("Count how many times the letter {c} occurs in s.", "How many letters {c} are in the word?"),
       "s.chars().filter(|&ch| ch == '{c}').count()", lambda v, k, b, c: str(v[0].count(c)), consts="c"),
    Op("string", "repeat", ("Print s repeated {k} times.", "Write the word {k} times without spaces."),
       "s.repeat({k})", lambda v, k, b, c: v[0] * k, consts="k"),
    Op("string", "vowels", ("Count the vowels (a, e, i, o, u) in s.", "How many vowels does the word contain?"),
       's.chars().filter(|ch| "aeiou".contains(*ch)).count()',
       lambda v, k, b, c: str(sum(ch in "aeiou" for ch in v[0]))),
    Op("string", "palin", ("Is s a palindrome?", "Check whether the word reads the same backwards."),
       'if s.chars().rev().collect::<String>() == s {{ "YES" }} else {{ "NO" }}',
       lambda v, k, b, c: _yes(v[0] == v[0][::-1]), output="Print YES if it is, and NO otherwise."),
]

# The operations the validation split may use; the hidden split uses every other one. Each
# family has some on both sides, operations that suggest each other stay on one side (greater
# or less than a constant, max/min/range in any family, add or subtract a constant, multiply by
# one, reverse in any family), and each side has about as many without constants as with them
# (the model solves those far more often), so the model does about as well on either side.
VISIBLE_OPS: frozenset[tuple[str, str]] = frozenset({
    ("pair", "add"), ("pair", "sub"), ("pair", "absdiff"), ("pair", "lin"),
    ("single", "square"), ("single", "affine"), ("single", "affsub"),
    ("array", "sum"), ("array", "sumsq"), ("array", "even"), ("array", "odd"),
    ("array", "countgt"), ("array", "countlt"), ("array", "counteq"), ("array", "sumgt"),
    ("map", "addk"), ("map", "subk"),
    ("string", "len"), ("string", "vowels"), ("string", "countc"),
})


def split_ops(split: str) -> list[Op]:
    """The operations a split's problems use: all for "train", VISIBLE_OPS for "valid", the rest for "test"."""
    if split not in _BUCKETS:
        raise ValueError(f"unknown split {split!r}: allowed are {', '.join(SPLITS)}")
    if split == "train":
        return list(_OPS)
    return [op for op in _OPS if ((op.family, op.name) in VISIBLE_OPS) == (split == "valid")]


_INTROS = (
    "",
    "Little Petya loves numbers.",
    "Alice is preparing a contest.",
    "Bob found a piece of paper.",
    "This is an easy problem.",
    "A robot has to answer a question.",
    "Vasya is bored at school.",
    "The jury prepared a simple task.",
)

_INPUTS = {
    "pair": "The only line contains two integers a and b.",
    "single": "The only line contains one integer x.",
    "array": "The first line contains an integer n. The second line contains n integers.",
    "map": "The first line contains an integer n. The second line contains n integers.",
    "string": "The only line contains a word s of lowercase letters.",
}
_SUBJECT = {
    "pair": "You are given two integers a and b.",
    "single": "You are given an integer x.",
    "array": "You are given an array of n integers.",
    "map": "You are given an array of n integers.",
    "string": "You are given a word s.",
}

_PRELUDE = (
    "use std::io::*;\n\nfn main() {\n    let mut t = String::new();\n"
    "    stdin().read_to_string(&mut t).unwrap();\n    let mut it = t.split_whitespace();\n"
)
_READ = {
    "pair": "    let a: i64 = it.next().unwrap().parse().unwrap();\n"
    "    let b: i64 = it.next().unwrap().parse().unwrap();\n",
    "single": "    let x: i64 = it.next().unwrap().parse().unwrap();\n",
    "array": "    let n: usize = it.next().unwrap().parse().unwrap();\n"
    "    let v: Vec<i64> = (0..n).map(|_| it.next().unwrap().parse().unwrap()).collect();\n",
    "string": "    let s = it.next().unwrap();\n",
}
_READ["map"] = _READ["array"]


def _solution(op: Op, k: int, b: int, c: str) -> str:
    expr = op.rust.format(k=k, b=b, c=c)
    body = _PRELUDE + _READ[op.family]
    if op.family == "array":
        body += f"    let r: i64 = {expr};\n    println!(\"{{}}\", r);\n"
    elif op.family == "map":
        body += f"    let r: Vec<String> = {expr};\n    println!(\"{{}}\", r.join(\" \"));\n"
    else:
        body += f"    println!(\"{{}}\", {expr});\n"
    return body + "}\n"


def _input_values(op: Op, rng: random.Random, case: int, k: int, c: str) -> Inputs:
    """Values for one test; the first cases are edge cases (zeros, one element, extremes)."""
    lo = 0 if op.nonneg else -1000
    if op.family == "pair":
        edges: list[Inputs] = [[0, 0], [1000, 1000], [lo, 1000], [7, lo]]
        return edges[case] if case < len(edges) else [rng.randint(lo, 1000), rng.randint(lo, 1000)]
    if op.family == "single":
        lo = 0 if op.nonneg else -10000
        edges = [[0], [1], [10000], [k], [lo]]
        return edges[case] if case < len(edges) else [rng.randint(lo, 10000)]
    if op.family in ("array", "map"):
        if case == 0:
            return [rng.randint(-50, 50)]
        if case == 1:
            return [k] * rng.randint(2, 5)
        if case == 2:
            return [0] * rng.randint(1, 4)
        return [rng.choice([k, -k, k + 1, k - 1, rng.randint(-50, 50)]) for _ in range(rng.randint(1, 10))]
    if case == 0:
        return [c or rng.choice("xyz")]
    if case == 1:
        half = "".join(rng.choice("abcde") for _ in range(rng.randint(1, 4)))
        return [half + half[::-1]]
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters + c * 4) for _ in range(rng.randint(1, 12)))]


def _format_input(op: Op, values: Inputs) -> str:
    if op.family in ("array", "map"):
        return f"{len(values)}\n{_join(values)}\n"
    return " ".join(str(v) for v in values) + "\n"


def _tests(op: Op, rng: random.Random, cases: list[int], k: int, b: int, c: str) -> dict[str, list[str]]:
    inputs, outputs = [], []
    for case in cases:
        values = _input_values(op, rng, case, k, c)
        inputs.append(_format_input(op, values))
        outputs.append(op.oracle(values, k, b, c) + "\n")
    return {"input": inputs, "output": outputs}


def task_key(problem: dict[str, Any]) -> tuple[Any, ...]:
    """The task a problem instantiates; train/valid/test never share one."""
    return tuple(problem["task"])


def _bucket(key: tuple[Any, ...]) -> int:
    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:4], "big") % 100


def _problem(rng: random.Random, op: Op) -> tuple[tuple[Any, ...], dict[str, Any]]:
    k = rng.randint(2, 30) if "k" in op.consts else 0
    b = rng.randint(1, 50) if "b" in op.consts else 0
    c = rng.choice("abcdefghijklmnopqrstuvwxyz") if "c" in op.consts else ""
    wording = rng.randrange(len(op.wordings))
    intro = rng.randrange(len(_INTROS))
    key = (op.family, op.name, k, b, c, wording, intro)
    text = op.wordings[wording].format(k=k, b=b, c=c)
    head = " ".join(part for part in (_INTROS[intro], _SUBJECT[op.family], text) if part)
    description = f"{head}\n\nInput\n\n{_INPUTS[op.family]}\n\nOutput\n\n{op.output}\n"
    public = rng.randint(1, 3)
    return key, {
        "description": description,
        "public_tests": _tests(op, rng, [5 + i for i in range(public)], k, b, c),
        "private_tests": _tests(op, rng, [0, 1, 2] + [10 + i for i in range(3)], k, b, c),
        "generated_tests": _tests(op, rng, [3, 4] + [20 + i for i in range(6)], k, b, c),
        "solution": _solution(op, k, b, c),
        "task": list(key),
    }


_TRIES = 300  # draws of one operation's tasks before it counts as used up in a held-out split


def _draw(rng: random.Random, split: str, ops: list[Op],
          used: set[tuple[Any, ...]]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """One problem of `split`. Train: an operation, then its task, kept when the task falls in the
    split. Held-out splits: an operation (each equally likely), then a task of it in the split not
    used yet; an operation with none left is dropped, so the few tasks of an operation without
    constants are neither repeated nor drawn more often than the others'."""
    if split == "train":
        key, problem = _problem(rng, rng.choice(ops))
        return (key, problem) if _bucket(key) in _BUCKETS[split] else None
    op = rng.choice(ops)
    for _ in range(_TRIES):
        key, problem = _problem(rng, op)
        if _bucket(key) in _BUCKETS[split] and key not in used:
            used.add(key)
            return key, problem
    ops.remove(op)
    return None


def generate(split: str, n: int, seed: int) -> list[dict[str, Any]]:
    """`n` problems of `split` ("train", "valid" or "test"), the same for the same (split, n, seed)."""
    ops = split_ops(split)
    rng = random.Random(f"rust-problems:{split}:{seed}")
    names = random.Random(f"rust-names:{split}:{seed}")  # apart from `rng`: a name says nothing of its problem
    problems: list[dict[str, Any]] = []
    used: set[tuple[Any, ...]] = set()
    while len(problems) < n:
        if not ops:
            raise ValueError(f"the {split} split has fewer than {n} distinct problems")
        drawn = _draw(rng, split, ops, used)
        if drawn is not None:
            problems.append({"name": f"p{names.getrandbits(48):012x}", **drawn[1]})
    return problems
