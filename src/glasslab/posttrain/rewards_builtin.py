"""The built-in reward tasks and their prompts, made from nothing but Python itself.

``arithmetic``: "What is 17 + 8?" — sums and products of small whole numbers (``ARITHMETIC_LIMITS``: sums
of two numbers below 25, products of two below 10), so that a 4-layer model tuned on the task briefly
answers a share of the held-out ones right and RL has something to raise (with sums below 100, 200 task-SFT
steps left a 4-layer width-64 model at 1% held-out pass@1: docs/LOG.md, 2026-12-04). The answer is exact.

``code``: "Write a Python function `f(x)` that returns x + 7." — one-line functions of a family of
behaviours and constants, each with assert tests (run by :mod:`glasslab.posttrain.rewards_code`).

Both draw their prompts from a seeded generator and hold out whole problems: a held-out prompt's question
(numbers and operator, or behaviour and constant) never appears among the training prompts.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from glasslab.errors import UserError
from glasslab.posttrain.rewards import Scores

ARITHMETIC_LIMITS = {"+": (25, 25), "*": (10, 10)}
"""Operator -> the bounds (exclusive) of its two operands."""
HELDOUT_EVERY = 10
"""One problem in this many is held out."""
_INTEGER = re.compile(r"-?\d+")


def arithmetic_problems() -> list[dict]:
    """Every arithmetic problem once, in a fixed order: ``{"prompt", "answer"}``."""
    problems = []
    for op, (a_max, b_max) in ARITHMETIC_LIMITS.items():
        for a in range(a_max):
            for b in range(b_max):
                answer = a + b if op == "+" else a * b
                problems.append({"prompt": f"What is {a} {op} {b}?", "answer": str(answer)})
    return problems


_CODE_FAMILIES = (
    ("returns x + {k}", lambda k, x: x + k),
    ("returns x * {k}", lambda k, x: x * k),
    ("returns x - {k}", lambda k, x: x - k),
    ("returns the remainder of x divided by {k}", lambda k, x: x % k),
    ("returns True when x is greater than {k}, else False", lambda k, x: x > k),
    ("returns the larger of x and {k}", lambda k, x: max(x, k)),
)


def code_problems() -> list[dict]:
    """Every code problem once: ``{"prompt", "tests"}`` (assert lines calling ``f``)."""
    problems = []
    for text, behaviour in _CODE_FAMILIES:
        for k in range(2, 12):
            tests = "\n".join(f"assert f({x}) == {behaviour(k, x)!r}" for x in (0, 3, 10, 25))
            problems.append({"prompt": f"Write a Python function `f(x)` that {text.format(k=k)}.", "tests": tests})
    return problems


def split_problems(problems: Sequence[dict], seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(training, held-out) problems: a seeded shuffle, one in ``HELDOUT_EVERY`` held out."""
    order = list(problems)
    random.Random(seed).shuffle(order)
    heldout = order[::HELDOUT_EVERY]
    return [p for i, p in enumerate(order) if i % HELDOUT_EVERY], heldout


PROBLEMS = {"arithmetic": arithmetic_problems, "code": code_problems}


def builtin_problems(name: str) -> list[dict]:
    if name not in PROBLEMS:
        raise UserError(f"builtin:{name}: no such task (expected one of {', '.join('builtin:' + n for n in PROBLEMS)})")
    return PROBLEMS[name]()


class Arithmetic:
    """1.0 when the first integer in the completion is the record's ``answer``, else 0.0."""

    name = "builtin:arithmetic"

    def score(self, records: Sequence[dict], completions: Sequence[str]) -> Scores:
        values: list[float | None] = []
        for record, completion in zip(records, completions, strict=True):
            found = _INTEGER.search(completion)
            values.append(float(found is not None and found.group() == record["answer"]))
        return Scores(values)

    def close(self) -> None:
        pass


def builtin_task(name: str):
    """The scorer of ``builtin:NAME``."""
    builtin_problems(name)  # one line for an unknown name
    if name == "code":
        from glasslab.posttrain.rewards_code import CodeTests

        return CodeTests()
    return Arithmetic()
