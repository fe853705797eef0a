"""Running the real ``glasslab`` command in a child process against this checkout's code.

Every test that needs the CLI in a subprocess imports from here (``from cli_runner import run_cli``);
fixtures live in ``conftest.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for child processes that import this checkout's glasslab, single-threaded."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """Run ``python -m glasslab ARGS`` to the end and return the completed process (text output)."""
    return subprocess.run(
        [sys.executable, "-m", "glasslab", *args], cwd=cwd, env=subprocess_env(**env),
        capture_output=True, text=True, timeout=timeout,
    )


def start_cli(*args: str, cwd: Path | None = None, **env: str) -> subprocess.Popen:
    """Start ``python -m glasslab ARGS`` (stdout and stderr piped, text) and return the process."""
    return subprocess.Popen(
        [sys.executable, "-m", "glasslab", *args], cwd=cwd, env=subprocess_env(**env),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
