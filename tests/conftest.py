"""Fixtures shared by the test modules; helpers for running the CLI live in ``cli_runner.py``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli_runner import run_cli
from observatory_lab import CHROMIUM_ARGS, chromium_path

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The project's reference data folder (../shared/data); skipped where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA}")
    return SHARED_DATA


@dataclass(frozen=True)
class DemoLab:
    """A finished ``glasslab demo --quick --no-serve`` lab: its root, what the command printed, how long it took."""

    root: Path
    stdout: str
    stderr: str
    seconds: float


@pytest.fixture(scope="session")
def demo_lab(tmp_path_factory) -> DemoLab:
    """The one demo lab of a test session (built once, a few minutes on 2 cores): every test that needs
    a finished demo reads this lab and must not change what is in it (rerunning cached steps is fine)."""
    root = tmp_path_factory.mktemp("where-the-demo-lab-lived") / "lab"  # a path the public record must not name
    started = time.monotonic()
    result = run_cli("demo", "--quick", "--no-serve", "--lab", str(root), timeout=1100)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return DemoLab(root, result.stdout, result.stderr, time.monotonic() - started)


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium (Debian's, never a downloaded one) per test module of the page tests."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture()
def page(browser):
    """A page of the module's Chromium that fails the test on a JavaScript error (a file may keep a stricter one)."""
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    page.close()
    assert not errors, errors
