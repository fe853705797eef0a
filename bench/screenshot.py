"""Take a PNG screenshot of an observatory page with headless Chromium (for the README).

    python bench/screenshot.py http://127.0.0.1:8765/run/<id> run.png [--width 1400] [--height 1000]
    python bench/screenshot.py --demo out.png      # builds a small demo lab, serves it, shoots a run page
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def screenshot(url: str, out: str | Path, width: int = 1400, height: int = 1000, wait_ms: int = 800) -> Path:
    """Open ``url`` in headless Chromium, wait for the page to draw, save a full-page PNG to ``out``."""
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        raise SystemExit("chromium not found on PATH")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", timeout=15_000)
        page.wait_for_timeout(wait_ms)
        page.screenshot(path=str(out), full_page=True)
        browser.close()
    return Path(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("url", nargs="?", help="page to shoot (or use --demo)")
    parser.add_argument("out", help="PNG file to write")
    parser.add_argument("--demo", action="store_true", help="serve a small demo lab and shoot its pages")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args()
    if not args.demo:
        print(screenshot(args.url, args.out, args.width, args.height))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from observatory_lab import ServerThread, build_lab

    root = build_lab(Path(tempfile.mkdtemp()) / "lab", hero_steps=40)
    out = Path(args.out)
    with ServerThread(root) as server:
        for page in ("run/hero-dddd4444", "ladder/ladder-cccc3333", "", "compare", "data/data-abc12345"):
            kind = page.split("/")[0] or "overview"
            name = out if kind == "run" else out.with_name(f"{out.stem}-{kind}.png")
            print(screenshot(f"{server.url}/{page}", name, args.width, args.height))


if __name__ == "__main__":
    main()
