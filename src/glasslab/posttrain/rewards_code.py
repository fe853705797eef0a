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

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
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


_LIMITED = """
import resource, sys
cpu, memory, program = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
resource.setrlimit(resource.RLIMIT_FSIZE, (2 ** 20, 2 ** 20))
del resource, sys, cpu, memory
exec(compile(program, "<answer>", "exec"), {"__name__": "__main__"})
"""
"""Sets the limits in the child itself before the answer runs (``preexec_fn`` is not safe beside threads)."""


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
        done = subprocess.run([*isolation(), sys.executable, "-I", "-c", _LIMITED, str(CPU_SECONDS),
                               str(MEMORY_BYTES), program], capture_output=True, timeout=WALL_SECONDS)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode == 0:
        return True
    return False if b"AssertionError" in done.stderr else None


class CodeTests:
    """1.0 when the answer passes every test of its record, else 0.0 (a crash or hang counted); answers
    run in parallel, one subprocess per core."""

    name = "builtin:code"

    def score(self, records: Sequence[dict], completions: Sequence[str]) -> Scores:
        # The answers wait on their subprocesses, not on this process: run as many at once as there are cores.
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            results = list(pool.map(run_answer, [answer_code(c) for c in completions], [r["tests"] for r in records]))
        return Scores(values=[float(bool(p)) for p in results], answer_failures=sum(p is None for p in results))

    def close(self) -> None:
        pass
