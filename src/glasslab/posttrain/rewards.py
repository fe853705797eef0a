"""Rewards a program checks: the built-in tasks and a user's reward file, behind one interface.

A task scores a batch of completions, each against the prompt record it answers (a JSON object with at
least ``"prompt"``; the built-in tasks add ``"answer"`` or ``"tests"``), as :class:`Scores`:

- ``builtin:arithmetic``: small sums and products; 1.0 when the first integer of the completion is the exact
  answer, else 0.0 (:mod:`glasslab.posttrain.rewards_builtin` makes the prompts and their held-out split);
- ``builtin:code``: write a small Python function; the answer runs against the prompt's tests in a
  subprocess with time and memory limits (:mod:`glasslab.posttrain.rewards_code`); 1.0 when all pass. An
  answer that crashes, hangs or exceeds its memory scores 0.0 and is counted (``answer_failures``);
- a user's Python file defining ``reward(prompt, completion) -> float`` (``prompt`` is the record, a dict;
  ``completion`` the reply's text). It runs in a worker process (:mod:`glasslab.posttrain.reward_worker`)
  with a time limit per call. A call that raises, hangs or returns something other than a finite number is
  a *failure*: its value is None, the failure is named ``file:line: what`` and counted, and the sample
  leaves its group (never a silent 0: a broken reward must not read as a wrong answer).
"""

from __future__ import annotations

import json
import math
import select
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from glasslab.errors import UserError

BUILTIN_PREFIX = "builtin:"
REWARD_TIMEOUT_S = 5.0
"""Seconds a call of a user's ``reward`` may take before it counts as hanging."""


@dataclass
class Scores:
    """One batch's rewards: ``values[i]`` for completion i (None: the reward failed on it), the failures
    named ``file:line: what`` (one per failed sample), and answers that crashed or hung (scored 0.0)."""

    values: list[float | None]
    failures: list[str] = field(default_factory=list)
    answer_failures: int = 0


class RewardTask(Protocol):
    """What GRPO asks of a task: a name, and scores for completions of prompt records."""

    name: str

    def score(self, records: Sequence[dict], completions: Sequence[str]) -> Scores: ...

    def close(self) -> None: ...


def open_reward(spec: str) -> RewardTask:
    """The task ``spec`` names: ``builtin:arithmetic``, ``builtin:code`` or a reward file's path (one line
    naming it when it is neither)."""
    if spec.startswith(BUILTIN_PREFIX):
        from glasslab.posttrain.rewards_builtin import builtin_task

        return builtin_task(spec[len(BUILTIN_PREFIX):])
    if not Path(spec).is_file():
        raise UserError(f"--reward {spec}: not a file, nor builtin:arithmetic / builtin:code")
    return RewardFile(spec)


class RewardFile:
    """A user's ``reward(prompt, completion) -> float``, called in a worker process, each call under
    ``timeout_s`` seconds; a worker that stops answering (a hang the worker's alarm cannot interrupt) is
    killed and restarted, and the sample it was on fails."""

    def __init__(self, path: str | Path, timeout_s: float = REWARD_TIMEOUT_S) -> None:
        self.path = Path(path).resolve()
        self.name = self.path.name
        self.timeout_s = timeout_s
        self._worker: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        worker = subprocess.Popen([sys.executable, "-m", "glasslab.posttrain.reward_worker", str(self.path),
                                   str(self.timeout_s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = self._read(worker, self.timeout_s + 30)
        if hello is None or "error" in hello:
            worker.kill()
            why = hello["error"] if hello else "the worker did not start"
            raise UserError(f"{self.path}: {why}")
        return worker

    def _read(self, worker: subprocess.Popen, timeout_s: float) -> dict | None:
        ready, _, _ = select.select([worker.stdout], [], [], timeout_s)
        line = worker.stdout.readline() if ready else ""
        return json.loads(line) if line else None

    def score(self, records: Sequence[dict], completions: Sequence[str]) -> Scores:
        scores = Scores(values=[])
        for record, completion in zip(records, completions, strict=True):
            value, failure = self._call(record, completion)
            scores.values.append(value)
            if failure:
                scores.failures.append(failure)
        return scores

    def _call(self, record: dict, completion: str) -> tuple[float | None, str | None]:
        self._worker = self._worker or self._start()
        self._worker.stdin.write(json.dumps({"prompt": record, "completion": completion}) + "\n")
        self._worker.stdin.flush()
        answer = self._read(self._worker, self.timeout_s + 5)
        if answer is None:  # hung past its alarm, or died: a fresh worker for the next sample
            self._worker.kill()
            self._worker.wait()
            self._worker = None
            return None, f"{self.path}: reward did not return within {self.timeout_s:g} s (worker restarted)"
        if "error" in answer:
            return None, answer["error"]
        value = answer["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return None, f"{self.path}: reward returned {answer.get('repr', value)!s}, expected a finite number"
        return float(value), None

    def close(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker.wait()
            self._worker = None
