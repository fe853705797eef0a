"""PNG screenshots of observatory pages with headless Chromium (for the README and for review).

    python bench/screenshot.py --lab LAB --out DIR     # serve LAB, shoot each page of it into DIR
    python bench/screenshot.py URL out.png             # one page of a running server
    python bench/screenshot.py --smoke --out DIR       # a small synthetic lab, every page

Each page is taken once drawn (``body[data-ready]``), at ``--width`` pixels wide and at most
``--max-height`` tall (the top of the page, where its story starts); PNGs are palette-quantised
when Pillow is installed, to keep the README light. Prints one line per file and ends with
``pages_shot: N``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def shoot(page, url: str, out: Path, max_height: int, wait_ms: int = 600) -> Path:
    """Open ``url`` in ``page``, wait until it is drawn, save the top ``max_height`` pixels to ``out``."""
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    page.wait_for_timeout(wait_ms)
    height = min(max_height, page.evaluate("() => document.documentElement.scrollHeight"))
    width = page.viewport_size["width"]
    page.screenshot(path=str(out), full_page=True, clip={"x": 0, "y": 0, "width": width, "height": height})
    _quantise(out)
    return out


def _quantise(path: Path) -> None:
    try:
        from PIL import Image
    except ImportError:  # optional: the PNG stays as Chromium wrote it
        return
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


def lab_pages(lab_root: Path) -> list[tuple[str, str]]:
    """(file stem, path) for each page worth a picture: overview, compare, every ladder and data
    report, the hero of each ladder (else the first run), one rung, and a provenance page."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from glasslab.layout import FIT_FILE, RUN_RECORD
    from glasslab.observatory.lab_scan import Lab
    from glasslab.observatory.ladder_page import find_hero

    lab = Lab(lab_root)
    index = lab.index()
    pages = [("overview", "/"), ("compare", "/compare")]
    heroes = []
    for fit_id, folder in index.fits.items():
        pages.append((f"ladder-{Path(fit_id).name}", f"/ladder/{fit_id}"))
        hero = find_hero(lab, lab.json(folder / FIT_FILE) or {})
        if hero:
            heroes.append(hero)
    runs = heroes or list(index.runs)[:1]
    rungs = [r for r in index.runs if (lab.json(index.runs[r] / RUN_RECORD) or {}).get("role") == "rung"]
    for run_id in [*runs, *rungs[-1:]]:
        pages.append((f"run-{Path(run_id).name}", f"/run/{run_id}"))
    pages += [(f"data-{Path(r).name}", f"/data/{r}") for r in index.reports]
    if runs:
        pages.append((f"provenance-{Path(runs[0]).name}", f"/provenance/{runs[0]}"))
    return pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", nargs="?", help="one page to shoot (with OUT_PNG)")
    parser.add_argument("out_png", nargs="?", help="the PNG for URL")
    parser.add_argument("--lab", type=Path, help="serve this lab and shoot each of its pages")
    parser.add_argument("--smoke", action="store_true", help="shoot a small synthetic lab (the tests' lab)")
    parser.add_argument("--out", type=Path, help="folder for the PNGs of --lab / --smoke")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--max-height", type=int, default=2400)
    args = parser.parse_args()
    if args.url is None and args.lab is None and not args.smoke:
        parser.error("give URL OUT_PNG, or --lab LAB --out DIR, or --smoke --out DIR")
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        raise SystemExit("chromium not found on PATH")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": args.width, "height": 900})
        if args.url:
            print(shoot(page, args.url, Path(args.out_png or "page.png"), args.max_height))
            print("pages_shot: 1")
            return
        if args.out is None:
            parser.error("--lab and --smoke need --out DIR")
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from observatory_lab import build_lab, serve_lab

        lab_root = args.lab or build_lab(Path(tempfile.mkdtemp()) / "lab", hero_steps=40)
        args.out.mkdir(parents=True, exist_ok=True)
        shot = 0
        with serve_lab(lab_root) as server:
            for stem, path in lab_pages(lab_root):
                print(shoot(page, server.url + path, args.out / f"{stem}.png", args.max_height))
                shot += 1
            page.goto("about:blank")  # close the page's event stream before the server stops
        browser.close()
    print(f"pages_shot: {shot}")


if __name__ == "__main__":
    main()
