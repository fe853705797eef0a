"""The static site: the same pages as the live server, as files that work from any host or file://.

Browsers refuse ``fetch`` on file:// pages, so each page's data is a script that sets
``window.GLASSLAB_DATA`` and the links between pages are a script that sets ``GLASSLAB_SITE``.
Every file is written to a temp name and renamed, so a host serving the folder while ``--watch``
re-exports never serves half a file. A static site cannot rebuild a step's batch on demand, so each
pretraining run's page carries the batches a reader most asks for, rebuilt once at export
(``batch_view.published_batches``). ``watch`` re-exports only the pages whose files changed, so one
run that logged a step costs its own pages and the lab-wide ones (overview, compare), not the lab.

A published site is a public record: each page's data goes through :class:`glasslab.public.Publicizer`,
so no local path or host name the lab's records hold reaches it (the live server shows them to its user).
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from glasslab.errors import UserError
from glasslab.lab.card import experiments_in_lab
from glasslab.lab.registry import registry_files
from glasslab.layout import (
    BUILD_PROGRESS,
    BUILD_RECORD,
    CARDS_DIR,
    CHECKPOINT_LIST,
    FIT_FILE,
    METRICS_DB,
    REPORT_FILE,
    RESULT_FILE,
    RUN_RECORD,
    STEP_RECORD,
    write_bytes_atomic,
    write_text_atomic,
)
from glasslab.observatory.batch_view import (
    EVENLY_SPACED,
    PUBLISHED_ROWS,
    PUBLISHED_TEXT_CHARS,
    panel_json,
    published_batches,
)
from glasslab.observatory.lab_scan import Lab, file_stamp
from glasslab.observatory.page_data import build_page
from glasslab.observatory.relations import Relations
from glasslab.observatory.run_page import MAX_KEYS_PER_READ, read_run_series, read_run_vectors
from glasslab.observatory.runs import open_run, planned_steps
from glasslab.observatory.shell import STATIC_FILES, render_shell, script_json, static_file
from glasslab.public import Publicizer
from glasslab.track.lab_events import lab_event_files
from glasslab.track.step_record import step_record

WATCH_SECONDS = 3.0
# Bytes of series JSON per chunk file: a 100,000-step metric downsampled to 2,000 points is ~70 kB,
# so a chart of a few metrics loads one or two files, and a short run is one file.
CHUNK_BYTES = 400_000


def page_file(page: str, item_id: str | None) -> str:
    """A flat, safe file name for a page (ids may hold any character a folder name can)."""
    if item_id is None:
        return "index.html" if page == "overview" else f"{page}.html"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", item_id).strip("._")[:80]
    digest = hashlib.sha256(item_id.encode()).hexdigest()[:8]
    return f"{page}-{slug}-{digest}.html"


def figure_file(item_id: str, name: str) -> str:
    """Where the site keeps figure ``name`` (a PNG a step wrote, e.g. a fit's ``ladder.png``) of folder
    ``item_id``, so a card's Markdown can show it as an image from the published site."""
    return f"figures/{page_file('figure', item_id).removesuffix('.html')}-{name}"


FIT_INPUT_FILES = ("points.csv", "heroes.csv")
"""What an end-point fit was fitted on (``glasslab.ladder.fit_inputs``): the site carries them beside its figures."""


def site_figures(lab: Lab) -> dict[str, Path]:
    """Every figure the site carries — each ladder fit's PNGs — and each fit's input files, by their file under
    the site."""
    files = {}
    for fit_id, folder in lab.index().fits.items():
        inputs = [folder / name for name in FIT_INPUT_FILES if (folder / name).is_file()]
        files.update({figure_file(fit_id, path.name): path for path in [*sorted(folder.glob("*.png")), *inputs]})
    return files


def site_pages(lab: Lab) -> list[tuple[str, str | None]]:
    """Every page of the site: overview, compare, and one per run, ladder, report, provenance and
    experiment card."""
    index = lab.index()
    pages: list[tuple[str, str | None]] = [("overview", None), ("compare", None)]
    pages += [("run", r) for r in index.runs] + [("provenance", r) for r in index.runs]
    pages += [("ladder", f) for f in index.fits] + [("data", r) for r in index.reports]
    pages += [("experiment", name) for name in experiments_in_lab(lab.root)]
    return pages


class SiteInputs:
    """The files each page of the site is drawn from, stamped once per export round: when none of a
    page's files changed, the exported page is still current.

    Pages share most of their inputs (every run page links through every record of the lab), so the
    shared groups are stamped once a round, not once a page: a lab of a thousand runs has a few
    thousand files and a few thousand pages.
    """

    RUN_FILES = (METRICS_DB, f"{METRICS_DB}-wal", RUN_RECORD, STEP_RECORD, CHECKPOINT_LIST)

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.index = lab.index()
        self._groups: dict[str, tuple] = {}

    def stamps(self, paths: Iterable[Path]) -> tuple:
        return tuple(file_stamp(p) for p in paths)

    def run(self, run_id: str) -> tuple:
        """Stamps of one run's files (its store, ``run.json``, ``step.json``)."""
        return self.stamps(self.index.runs[run_id] / n for n in self.RUN_FILES)

    def group(self, name: str) -> tuple:
        """Stamps of a group of files many pages are drawn from, taken once this round."""
        if name not in self._groups:
            index, root = self.index, self.lab.root
            if name == "runs":  # every run's files
                stamps = tuple(self.run(r) for r in index.runs)
            elif name == "records":  # links between pages (forks, exports, datasets) come from these
                stamps = self.stamps([*(f / RUN_RECORD for f in index.runs.values()),
                                      *(f / STEP_RECORD for f in index.steps.values()),
                                      *(f / REPORT_FILE for f in index.reports.values())])
            elif name == "lab_events":
                stamps = self.stamps(f for db in lab_event_files(root) for f in (db, Path(f"{db}-wal")))
            elif name == "lab":  # what the overview and the card pages add: steps, fits, cards, results
                jsons = [f / n for f in (*index.steps.values(), *index.fits.values()) for n in (STEP_RECORD, FIT_FILE)]
                # Cards: every stored version, run and conclusion, and the registry.
                cards = sorted((root / CARDS_DIR).glob("*/*")) + registry_files(root)
                stamps = self.stamps([*jsons, *cards, *(f / RESULT_FILE for f in index.runs.values())])
            else:
                raise ValueError(name)
            self._groups[name] = stamps
        return self._groups[name]

    def page(self, page: str, item_id: str | None) -> tuple:
        """The stamp of everything ``page`` is drawn from."""
        if page == "run":
            return (self.run(item_id), self.group("lab_events"), self.group("records"))
        if page in ("provenance", "series"):
            return self.run(item_id)
        if page == "data":
            users = Relations(self.lab).runs_using(item_id)
            folder = self.index.reports[item_id]  # a built dataset, or one being built (its progress file)
            return (self.stamps([folder / REPORT_FILE, folder / BUILD_PROGRESS, folder / BUILD_RECORD]),
                    tuple(self.run(r) for r in users), self.group("records"))
        if page == "ladder":
            return (self.stamps([self.index.fits[item_id] / FIT_FILE, *registry_files(self.lab.root)]),
                    self.group("runs"))
        if page == "compare":
            return self.group("runs")
        return (self.group("runs"), self.group("lab"), self.group("lab_events"))


def lab_publicizer(lab: Lab) -> Publicizer:
    """The public copy maker for ``lab``: its root, and every host its steps and runs ran on."""
    index = lab.index()
    records = [lab.json(f / STEP_RECORD) for f in index.steps.values()]
    records += [lab.json(f / RUN_RECORD) for f in index.runs.values()]
    return Publicizer(lab.root, {str(r["host"]) for r in records if isinstance(r, dict) and r.get("host")})


def series_prefix(run_id: str) -> str:
    """Where a run's series live on the site: ``<prefix>-index.js`` says which chunk file
    (``<prefix>-<n>.js``) holds each metric's series and each vector's."""
    return f"data/{page_file('series', run_id).removesuffix('.html')}"


def series_index_file(run_id: str) -> str:
    return f"{series_prefix(run_id)}-index.js"


def steps_file(run_id: str) -> str:
    """Where a run's step record lives on the site (every step's loss and batch hash, ``track/step_record.py``)."""
    return f"data/{page_file('steps', run_id).removesuffix('.html')}.js"


def batch_prefix(run_id: str) -> str:
    """Where a run's published batches live on the site: ``<prefix>-index.js`` says which file
    (``<prefix>-<step>-<attempt>.js``) holds each batch."""
    return f"data/{page_file('batch', run_id).removesuffix('.html')}"


def batch_index_file(run_id: str) -> str:
    return f"{batch_prefix(run_id)}-index.js"


def has_batches(record: dict[str, Any]) -> bool:
    """Whether the run's batches can be rebuilt: pretraining runs (post-training ones are not drawn by the
    pretraining loader) with a dataset."""
    return bool(record.get("dataset")) and record.get("role") not in ("sft", "dpo", "rl")


def pack_chunks(encoded: dict[str, str], budget: int) -> list[list[str]]:
    """Keys in order, cut into chunks of about ``budget`` bytes of JSON (a chunk holds at least one)."""
    chunks: list[list[str]] = []
    size = 0
    for key, text in encoded.items():
        if not chunks or (chunks[-1] and size + len(text) > budget):
            chunks.append([])
            size = 0
        chunks[-1].append(key)
        size += len(text)
    return chunks


class Publisher:
    """Exports a lab to ``out_dir``; remembers what it wrote so the next export skips unchanged pages."""

    def __init__(self, lab_root: str | Path, out_dir: str | Path) -> None:
        self.lab = Lab(lab_root)
        self.out = Path(out_dir)
        self.stamps: dict[tuple[str, str | None], tuple] = {}
        self.batch_files: set[str] = set()  # a step's batch in an attempt never changes: written once
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
        for name, source in site_figures(self.lab).items():
            stamp = (file_stamp(source),)
            if self.stamps.get(("figure", name)) != stamp:
                write_bytes_atomic(self.out / name, source.read_bytes())
                self.stamps[("figure", name)] = stamp
                written.append(name)
        inputs = SiteInputs(self.lab)
        self.public = lab_publicizer(self.lab)
        for page, item_id in pages:
            stamp = inputs.page(page, item_id)
            if self.stamps.get((page, item_id)) == stamp:
                continue
            data = self._export_page(page, item_id)
            if data is not None:
                written.append(page_file(page, item_id))
            self.stamps[(page, item_id)] = stamp
            # A run's series change only with its store, which its page is drawn from too.
            series_stamp = inputs.page("series", item_id) if page == "run" else None
            if data is not None and series_stamp and self.stamps.get(("series", item_id)) != series_stamp:
                files = self._export_series(item_id, data["keys"], data["vector_keys"])
                if files is not None:  # else the store could not be read: the next round tries again
                    written += files
                    self.stamps[("series", item_id)] = series_stamp
            if page == "run" and data is not None and "batch_index" in data:
                written += self._export_batches(item_id, data)
        return written

    def _export_page(self, page: str, item_id: str | None) -> dict[str, Any] | None:
        """Write one page and its data script; returns the page's data (None: no such page now)."""
        data = build_page(self.lab, page, item_id, with_series=False)
        if data is None:
            return None
        data = self.public.data(data)
        if page == "compare":
            data["series_files"] = {run["id"]: series_index_file(run["id"]) for run in data["runs"]}
        if page == "run":
            data["series_index"] = series_index_file(item_id)
            data["steps_file"] = steps_file(item_id)
            if has_batches(data.get("record") or {}):
                data["batch_index"] = batch_index_file(item_id)
        name = page_file(page, item_id)
        data_name = f"data/{name.removesuffix('.html')}.js"
        write_text_atomic(self.out / data_name, f"window.GLASSLAB_DATA = {script_json(data)};\n")
        boot: dict[str, Any] = {"mode": "static", "page": page, "id": item_id,
                                "exported": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        html = render_shell(data["title"], boot, assets="static/", home="index.html",
                            data_scripts=("data/site.js", data_name))
        write_text_atomic(self.out / name, html)
        return data

    def _export_batches(self, run_id: str, data: dict[str, Any]) -> list[str]:
        """The run's published batches (those not written before) and their index; returns the files
        written. A batch the run cannot rebuild (its dataset is gone, it recorded none) leaves the index
        with the one line ``glasslab batch`` would print, so the page says why."""
        folder = self.lab.index().runs[run_id]
        with open_run(folder) as reader:
            try:  # a store written before batches were recorded has no table for them
                trained = [(step, attempt) for step, attempt, _ in reader.batch_hashes()] if reader else []
            except sqlite3.Error:
                trained = []
        in_force: dict[int, int] = {}
        for step, attempt in trained:
            in_force[step] = max(attempt, in_force.get(step, attempt))
        prefix = batch_prefix(run_id)
        index: dict[str, Any] = {"files": {}, "in_force": {}, "text_chars": PUBLISHED_TEXT_CHARS,
                                 "rows": PUBLISHED_ROWS, "evenly_spaced": EVENLY_SPACED, "error": None}
        written = []
        for step, attempt in published_batches(trained, data["events"], planned_steps(data.get("record") or {})):
            name = f"{prefix}-{step}-{attempt}.js"
            if name not in self.batch_files:
                from glasslab.data.batches import rebuild_batch  # torch: only for runs with batches

                try:
                    batch = rebuild_batch(folder, step, attempt)
                except UserError as exc:
                    index["error"] = self.public.text(str(exc))
                    break
                body = self.public.data(panel_json(batch, PUBLISHED_TEXT_CHARS, PUBLISHED_ROWS))
                holder = "(window.GLASSLAB_BATCHES = window.GLASSLAB_BATCHES || {})"
                write_text_atomic(self.out / name, f"{holder}[{script_json(name)}] = {script_json(body)};\n")
                self.batch_files.add(name)
                written.append(name)
            index["files"][f"{step}@{attempt}"] = name
            index["in_force"][str(step)] = in_force[step]
        holder = "(window.GLASSLAB_BATCH_INDEX = window.GLASSLAB_BATCH_INDEX || {})"
        name = batch_index_file(run_id)
        write_text_atomic(self.out / name, f"{holder}[{script_json(run_id)}] = {script_json(index)};\n")
        return [*written, name]

    def _export_series(self, run_id: str, keys: list[str], vector_keys: list[str]) -> list[str] | None:
        """A run's series and vectors as chunk files plus their index (the run and compare pages load
        the chunks of the charts they draw), so a run that changed rewrites its own files only; and its
        step record (``track/step_record.py``), which ``glasslab reproduce`` reads.
        Returns the files written; None when the store cannot be read now (nothing is written)."""
        folder = self.lab.index().runs[run_id]
        series: dict[str, Any] = {}
        for start in range(0, len(keys), MAX_KEYS_PER_READ):  # a few hundred metrics read at a time
            part = read_run_series(folder, keys[start:start + MAX_KEYS_PER_READ])
            if part is None:
                return None
            series.update(part)
        vectors = read_run_vectors(folder, vector_keys)
        with open_run(folder) as reader:
            steps = step_record(reader) if reader is not None else None
        if vectors is None or steps is None:
            return None
        prefix = series_prefix(run_id)
        index: dict[str, Any] = {"prefix": prefix, "scalars": {}, "vectors": {}}
        written, number = [], 0
        for kind, values in (("scalars", series), ("vectors", vectors)):
            encoded = {key: script_json(one) for key, one in values.items()}
            for chunk in pack_chunks(encoded, CHUNK_BYTES):
                body = ",".join(f"{script_json(key)}:{encoded[key]}" for key in chunk)
                name = f"{prefix}-{number}.js"
                holder = "(window.GLASSLAB_CHUNKS = window.GLASSLAB_CHUNKS || {})"
                write_text_atomic(self.out / name, f'{holder}[{script_json(name)}] = {{"{kind}":{{{body}}}}};\n')
                index[kind].update({key: number for key in chunk})
                written.append(name)
                number += 1
        holder = "(window.GLASSLAB_STEPS = window.GLASSLAB_STEPS || {})"
        write_text_atomic(self.out / steps_file(run_id), f"{holder}[{script_json(run_id)}] = {script_json(steps)};\n")
        written.append(steps_file(run_id))
        holder = "(window.GLASSLAB_SERIES_INDEX = window.GLASSLAB_SERIES_INDEX || {})"
        name = series_index_file(run_id)
        write_text_atomic(self.out / name, f"{holder}[{script_json(run_id)}] = {script_json(index)};\n")
        # Chunks a larger export of this run left behind: the new index no longer names them.
        for old in self.out.glob(f"{prefix}-*.js"):
            if old.stem.rsplit("-", 1)[-1].isdigit() and int(old.stem.rsplit("-", 1)[-1]) >= number:
                old.unlink()
        return [*written, name]


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
