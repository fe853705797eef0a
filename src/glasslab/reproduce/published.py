"""A pretraining run's public record, read back from where it was published: a site's run page (a file in
a site folder, or an ``http(s)://`` address) or the run's own folder in a lab.

What ``glasslab reproduce`` needs of a run: ``run.json`` (the resolved config, code commit and dirty flag
with the diff's hash, package versions, platform, the dataset's folder name and manifest hash), the kept
checkpoints with their weights' sha256 (``checkpoints.json``), its step record — every step's
``train/loss`` and input-token hash at full resolution (``track/step_record.py``) — and the step that
built the dataset (its function, config and manifest, from the data page). A site's page keeps its data
in a script beside it (``data/<page>.js``, ``window.GLASSLAB_DATA = {...};``) and the step record in the
script its ``steps_file`` names; all are read as JSON.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from glasslab.data.handle import find_dataset
from glasslab.errors import UserError
from glasslab.layout import CHECKPOINT_LIST, RUN_RECORD, STEP_RECORD, read_json
from glasslab.reproduce.replay import PublishedRun
from glasslab.track import RunReader
from glasslab.track.step_record import by_step, step_record


def read_published(source: str) -> PublishedRun:
    """The public record at ``source``: a run folder, a site's run page file, or its ``http(s)://`` address."""
    if source.startswith(("http://", "https://")):
        return _from_site(source.rsplit("/", 1)[0], source.rsplit("/", 1)[1], _fetch_url)
    path = Path(source)
    if (path / RUN_RECORD).is_file():
        return _from_folder(path)
    if path.is_file() and path.suffix == ".html":
        return _from_site(str(path.parent), path.name, _fetch_file)
    raise UserError(f"{source}: neither a run folder ({RUN_RECORD}) nor a published run page (run-….html) "
                    "nor an http(s):// address of one")


def _from_folder(folder: Path) -> PublishedRun:
    record = read_json(folder / RUN_RECORD) or {}
    listed = read_json(folder / CHECKPOINT_LIST) or {}
    with RunReader(folder) as reader:
        steps = step_record(reader)
    dataset = (record.get("dataset") or {}).get("folder")
    step = read_json(folder.parent / dataset / STEP_RECORD) if dataset else None
    data_step = {k: step[k] for k in ("name", "function", "config")} if step and "function" in step else None
    if data_step is not None:
        handle = find_dataset(folder.parent / dataset)
        data_step["manifest"] = handle.manifest if handle is not None else None
    return PublishedRun(folder.name, record, listed.get("checkpoints", []), *by_step(steps), data_step, folder)


def _fetch_file(base: str, name: str) -> str:
    path = Path(base) / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({type(exc).__name__}); expected a published site's file") from exc


def _fetch_url(base: str, name: str) -> str:
    url = f"{base}/{name}"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.read().decode("utf-8")
    except OSError as exc:
        raise UserError(f"{url}: cannot fetch it ({exc}); expected a published site's file") from exc


def _script_json(text: str, where: str) -> Any:
    """The JSON a site's data script assigns (``window.X = {...};``, a series file ``(…)["RUN"] = {...};``)."""
    try:
        head = text.index("] = ") + 3 if text.startswith("(") else text.index("=") + 1
        return json.loads(text[head:].strip().removesuffix(";"))
    except (IndexError, ValueError) as exc:
        raise UserError(f"{where}: not a glasslab site data script ({type(exc).__name__})") from exc


def _from_site(base: str, page: str, fetch) -> PublishedRun:
    if not (page.startswith("run-") and page.endswith(".html")):
        raise UserError(f"{base}/{page}: not a run page (run-….html)")
    stem = page.removesuffix(".html")
    data = _script_json(fetch(base, f"data/{stem}.js"), f"{base}/data/{stem}.js")
    steps_name = data.get("steps_file")
    if not steps_name:
        raise UserError(f"{base}/{page}: its data names no step record (steps_file); publish the lab again")
    steps = _script_json(fetch(base, steps_name), f"{base}/{steps_name}")
    data_step = None
    dataset = (data.get("links") or {}).get("dataset")
    if dataset:
        site = _script_json(fetch(base, "data/site.js"), f"{base}/data/site.js")
        data_page = (site.get("links") or {}).get(f"data:{dataset}")
        if data_page:
            page_data = _script_json(fetch(base, f"data/{data_page.removesuffix('.html')}.js"), data_page)
            data_step = page_data.get("built_by")
    return PublishedRun(data["id"], data.get("record") or {}, data.get("checkpoints") or [], *by_step(steps),
                        data_step)
