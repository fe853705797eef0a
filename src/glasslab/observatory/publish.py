"""The static site: the same pages as the live server, as files that work from any host or file://.

Browsers refuse ``fetch`` on file:// pages, so each page's data is a script that sets
``window.GLASSLAB_DATA`` and the links between pages are a script that sets ``GLASSLAB_SITE``.
Every file is written to a temp name and renamed, so a host serving the folder while ``--watch``
re-exports never serves half a file. ``watch`` re-exports only the pages whose files changed.
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path
from typing import Any

from glasslab.layout import (
    FIT_FILE,
    LAB_EVENTS_DB,
    METRICS_DB,
    PREDICTIONS_FILE,
    REPORT_FILE,
    RUN_RECORD,
    STEP_RECORD,
    write_bytes_atomic,
    write_text_atomic,
)
from glasslab.observatory.compare_page import metric_series
from glasslab.observatory.lab_scan import Lab, file_stamp
from glasslab.observatory.page_data import build_page
from glasslab.observatory.relations import Relations
from glasslab.observatory.shell import STATIC_FILES, render_shell, script_json, static_file

WATCH_SECONDS = 3.0


def page_file(page: str, item_id: str | None) -> str:
    """A flat, safe file name for a page (ids may hold any character a folder name can)."""
    if item_id is None:
        return "index.html" if page == "overview" else f"{page}.html"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", item_id).strip("._")[:80]
    digest = hashlib.sha256(item_id.encode()).hexdigest()[:8]
    return f"{page}-{slug}-{digest}.html"


def site_pages(lab: Lab) -> list[tuple[str, str | None]]:
    """Every page of the site: overview, compare, and one per run, ladder, report and provenance."""
    index = lab.index()
    pages: list[tuple[str, str | None]] = [("overview", None), ("compare", None)]
    pages += [("run", r) for r in index.runs] + [("provenance", r) for r in index.runs]
    pages += [("ladder", f) for f in index.fits] + [("data", r) for r in index.reports]
    return pages


def page_inputs(lab: Lab, page: str, item_id: str | None) -> list[Path]:
    """The files a page is drawn from: when none changed, the exported page is still current."""
    index = lab.index()
    run_files = (METRICS_DB, f"{METRICS_DB}-wal", RUN_RECORD, STEP_RECORD)
    lab_events = [lab.root / LAB_EVENTS_DB, lab.root / f"{LAB_EVENTS_DB}-wal"]
    # Links between pages (forks, exports, datasets) come from every record in the lab.
    records = [*(f / RUN_RECORD for f in index.runs.values()), *(f / STEP_RECORD for f in index.steps.values()),
               *(f / REPORT_FILE for f in index.reports.values())]
    if page == "run":
        return [*(index.runs[item_id] / n for n in run_files), *lab_events, *records]
    if page == "provenance":
        return [index.runs[item_id] / n for n in run_files]
    if page == "data":
        users = Relations(lab).runs_using(item_id)
        return [index.reports[item_id] / REPORT_FILE, *(index.runs[r] / n for r in users for n in run_files), *records]
    runs = [folder / n for folder in index.runs.values() for n in run_files]
    if page == "ladder":
        return [index.fits[item_id] / FIT_FILE, lab.root / PREDICTIONS_FILE, *runs]
    if page == "compare":
        return runs
    jsons = [f / n for f in (*index.steps.values(), *index.fits.values()) for n in (STEP_RECORD, FIT_FILE)]
    return [*runs, *jsons, *lab_events]


class Publisher:
    """Exports a lab to ``out_dir``; remembers what it wrote so the next export skips unchanged pages."""

    def __init__(self, lab_root: str | Path, out_dir: str | Path) -> None:
        self.lab = Lab(lab_root)
        self.out = Path(out_dir)
        self.stamps: dict[tuple[str, str | None], tuple] = {}
        self.site_links: dict[str, str] | None = None

    def export(self) -> list[str]:
        """Write every page whose inputs changed since the last export; returns the files written."""
        written = []
        if not self.stamps:
            for name in STATIC_FILES:
                write_bytes_atomic(self.out / "static" / name, static_file(name))
        pages = site_pages(self.lab)
        links = {(page if item_id is None else f"{page}:{item_id}"): page_file(page, item_id)
                 for page, item_id in pages}
        if links != self.site_links:
            site = f"window.GLASSLAB_SITE = {script_json({'links': links})};\n"
            write_text_atomic(self.out / "data" / "site.js", site)
            self.site_links = links
            self.stamps.clear()  # new pages: links on the overview and elsewhere change too
        for page, item_id in pages:
            stamp = tuple(file_stamp(p) for p in page_inputs(self.lab, page, item_id))
            if self.stamps.get((page, item_id)) == stamp:
                continue
            if self._export_page(page, item_id):
                written.append(page_file(page, item_id))
            self.stamps[(page, item_id)] = stamp
        return written

    def _export_page(self, page: str, item_id: str | None) -> bool:
        data = build_page(self.lab, page, item_id, with_series=False)
        if data is None:
            return False
        if page == "compare":
            data["metric_files"] = self._export_metrics()
        name = page_file(page, item_id)
        data_name = f"data/{name.removesuffix('.html')}.js"
        write_text_atomic(self.out / data_name, f"window.GLASSLAB_DATA = {script_json(data)};\n")
        boot: dict[str, Any] = {"mode": "static", "page": page, "id": item_id,
                                "exported": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        html = render_shell(data["title"], boot, assets="static/", home="index.html",
                            data_scripts=("data/site.js", data_name))
        write_text_atomic(self.out / name, html)
        return True


    def _export_metrics(self) -> dict[str, str]:
        """One script per metric with every run's series (the compare page loads those it shows)."""
        files = {}
        for key, runs in metric_series(self.lab).items():
            name = f"data/{page_file('metric', key).removesuffix('.html')}.js"
            holder = "(window.GLASSLAB_METRICS = window.GLASSLAB_METRICS || {})"
            text = f"{holder}[{script_json(key)}] = {script_json(runs)};\n"
            write_text_atomic(self.out / name, text)
            files[key] = name
        return files


def publish(lab_root: str | Path, out_dir: str | Path) -> Path:
    """Export the whole lab once; returns the site's ``index.html``."""
    Publisher(lab_root, out_dir).export()
    return Path(out_dir) / "index.html"


def watch(lab_root: str | Path, out_dir: str | Path, every: float = WATCH_SECONDS,
          rounds: int | None = None, log=print) -> None:
    """Re-export what changed every ``every`` seconds (forever, or ``rounds`` times)."""
    publisher = Publisher(lab_root, out_dir)
    done = 0
    while rounds is None or done < rounds:
        written = publisher.export()
        if written:
            log(f"exported {len(written)} page(s) to {out_dir}")
        done += 1
        if rounds is None or done < rounds:
            time.sleep(every)
