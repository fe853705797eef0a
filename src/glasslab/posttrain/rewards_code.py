"""The code task's judge: an answer runs against its prompt's tests in a subprocess with limits.

Isolation: each answer runs in a fresh ``python -I`` (no user site, no environment variables read) with
``resource.setrlimit`` limits — ``CPU_SECONDS`` of CPU, ``MEMORY_BYTES`` of address space, no core file,
no new files over 1 MB — and a wall-clock timeout; inside a new user and network namespace
(``unshare -rn``: no network interface but loopback) when the machine allows it. Where it does not
(no ``unshare``, or user namespaces disabled), the fallback runs the same limits without the network
namespace, and the console says so once. Neither is a security boundary against a hostile answer; they
keep a wrong answer from hanging, swapping or reaching out.
"""

from __future__ import annotations

import re
import resource
import shutil
import subprocess
import sys
from collections.abc import Sequence
from functools import cache

from glasslab.posttrain.rewards import Scores

CPU_SECONDS = 2
MEMORY_BYTES = 512 * 2**20
WALL_SECONDS = 5.0
_FENCED = re.compile(r"```(?:python)?\n(.*?)(?:```|$)", re.S)


def answer_code(completion: str) -> str:
    """The code of a completion: its first fenced block, else the whole text."""
    fenced = _FENCED.search(completion)
    return fenced.group(1) if fenced else completion


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (2**20, 2**20))


@cache
def isolation() -> list[str]:
    """The command prefix that cuts the network (``unshare -rn``), or [] where it cannot (said once)."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        return [unshare, "-rn"]
    print("[rl] code answers run without a network namespace (unshare -rn unavailable); time and memory limits "
          "still apply", file=sys.stderr, flush=True)
    return []


def run_answer(code: str, tests: str) -> bool | None:
    """True when ``code`` passes ``tests``, False when a test fails, None when it crashed or hung."""
    program = f"{code}\n\n{tests}\n"
    try:
        done = subprocess.run([*isolation(), sys.executable, "-I", "-c", program], capture_output=True,
                              timeout=WALL_SECONDS, preexec_fn=_limit)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode == 0:
        return True
    return False if b"AssertionError" in done.stderr else None


class CodeTests:
    """1.0 when the answer passes every test of its record, else 0.0 (a crash or hang counted)."""

    name = "builtin:code"

    def score(self, records: Sequence[dict], completions: Sequence[str]) -> Scores:
        scores = Scores(values=[])
        for record, completion in zip(records, completions, strict=True):
            passed = run_answer(answer_code(completion), record["tests"])
            scores.values.append(float(bool(passed)))
            scores.answer_failures += passed is None
        return scores

    def close(self) -> None:
        pass
