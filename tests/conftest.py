"""Shared test helpers: run the CLI in a subprocess against this checkout's code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for child processes that import this checkout's glasslab, single-threaded."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """Run ``python -m glasslab ARGS`` and return the completed process (text output)."""
    return subprocess.run(
        [sys.executable, "-m", "glasslab", *args], cwd=cwd, env=subprocess_env(**env),
        capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def shared_data() -> Path:
    """The project's reference data folder (../shared/data); skipped where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA}")
    return SHARED_DATA
