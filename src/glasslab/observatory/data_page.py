"""The data page's data: the composition report, how the build ran (each stage's tasks, seconds and
throughput; a build still running, from its progress file), per-domain results of every run that
trained on the dataset (mixture weight, realised epochs, held-out loss and bits per byte), and warnings
a reader should not have to work out: a build stage that took more than a tenth of a domain, a domain
read many times over, an eval split as large as its training split; and the dataset's map (what is in it:
content domains, ``glasslab data map``)."""

from __future__ import annotations

import functools
import os
import socket
import sqlite3
import time
from typing import Any

from glasslab import sources
from glasslab.errors import UserError
from glasslab.layout import (
    BUILD_PROGRESS,
    BUILD_RECORD,
    MANIFEST_FILE,
    METRICS_DB,
    REPORT_FILE,
    RUN_RECORD,
    STEP_RECORD,
)
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.relations import Relations
from glasslab.observatory.runs import open_run, run_status
from glasslab.observatory.series import clean, finite

# Up to ~4 epochs of repeated data train nearly as well as fresh data; beyond that loss bends off
# its scaling law (Muennighoff et al. 2023, "Scaling Data-Constrained Language Models").
REPEAT_LIMIT = 4.0
DOMAIN_METRICS = {"weight": "mixture/weight/{}", "epochs": "mixture/epochs/{}", "loss": "eval/{}/loss",
                  "bpb": "eval/{}/bpb"}


def domain_results(lab: Lab, run_id: str, domains: list[str]) -> dict[str, Any]:
    """A run's latest mixture weight, epochs, eval loss and bpb per domain, plus its role and size."""
    folder = lab.index().runs[run_id]
    record = lab.json(folder / RUN_RECORD) or {}
    out: dict[str, Any] = {"id": run_id, "role": record.get("role"), "size_name": record.get("size_name"),
                           "status": None, "domains": {}}
    with open_run(folder) as reader:
        if reader is None:
            return out
        try:
            out["status"] = run_status(reader.meta("writer"), reader.meta("status"), None)
            for domain in domains:
                values = {}
                for field, pattern in DOMAIN_METRICS.items():
                    last = reader.last(pattern.format(domain))
                    values[field] = finite(last[1]) if last else None
                out["domains"][domain] = values
        except sqlite3.Error:
            pass
    return out


def warnings(report: dict[str, Any], runs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """``{kind, domain, text}`` for build stages that took more than a tenth of a domain (the report's
    ``large_removals``), eval splits as large as training splits and domains read more than
    ``REPEAT_LIMIT`` times (by a run, or by the report's mixture plan)."""
    found = [{"kind": "large_removal", "domain": removal.get("domain"), "text": removal.get("text")}
             for removal in report.get("large_removals") or []]
    for name, domain in (report.get("domains") or {}).items():
        train, held_out = domain.get("tokens"), domain.get("eval_tokens")
        if isinstance(train, (int, float)) and isinstance(held_out, (int, float)) and held_out >= train:
            found.append({"kind": "eval_ge_train", "domain": name,
                          "text": f"{name}: the eval split ({held_out:,.0f} tokens) is as large as the training "
                                  f"split ({train:,.0f} tokens); its eval loss says little and its training data "
                                  "runs out fast"})
    for phase in ((report.get("mixture") or {}).get("phases") or []):
        for name, epochs in (phase.get("epochs") or {}).items():
            if isinstance(epochs, (int, float)) and epochs > REPEAT_LIMIT:
                found.append({"kind": "repetition", "domain": name,
                              "text": f"{name}: the mixture plan reads it {epochs:.1f} times (phase from step "
                                      f"{phase.get('start_step', 0)}); beyond ~{REPEAT_LIMIT:g} epochs repeated "
                                      "data stops counting as new (Muennighoff et al. 2023)"})
    for run in runs:
        for name, values in run["domains"].items():
            epochs = values.get("epochs")
            if isinstance(epochs, (int, float)) and epochs > REPEAT_LIMIT:
                found.append({"kind": "repetition", "domain": name, "run": run["id"],
                              "text": f"{name}: run {run['id']} read it {epochs:.1f} times; beyond "
                                      f"~{REPEAT_LIMIT:g} epochs repeated data stops counting as new "
                                      "(Muennighoff et al. 2023)"})
    return found


def build_stages(lab: Lab, folder) -> dict[str, Any] | None:
    """How the build ran: from ``build.json`` once done, else from its progress file (with how long ago it
    last moved and its step's status, so a build that died is not shown as running)."""
    record = lab.json(folder / BUILD_RECORD)
    if record is not None and (folder / REPORT_FILE).is_file():
        return {"state": "done", "stages": record.get("stages") or [], "workers": record.get("workers"),
                "backend": record.get("backend"), "reruns": record.get("reruns") or [],
                "seconds": (record.get("timings") or {}).get("total_s")}
    progress = lab.json(folder / BUILD_PROGRESS)
    if progress is None:
        return None
    step = lab.json(folder / STEP_RECORD) or {}
    updated = progress.get("updated")
    state = "running" if step.get("status") in (None, "running") else step.get("status")
    if state == "running" and progress.get("host") == socket.gethostname() and not _alive(progress.get("pid")):
        state = "interrupted"  # killed: the same build run again resumes where it stopped
    return {"state": state,
            "stages": progress.get("stages") or [], "workers": progress.get("workers"),
            "backend": progress.get("backend"),
            "age_s": time.time() - updated if isinstance(updated, (int, float)) else None}


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def data_sources(lab: Lab, folder, build: dict[str, Any] | None) -> dict[str, Any]:
    """Where the page's numbers come from: the domains' documents and tokens (``glasslab data report``
    recomputes them), the funnel (``report.json``) and the documents each build stage kept (the build
    record's ``stages`` in the table's order, or its progress file while it builds)."""
    lab_name = lab.root.resolve().name
    record = BUILD_RECORD if (build or {}).get("state") == "done" else BUILD_PROGRESS
    return {"report": sources.data_report(lab_name, folder.name),
            "funnel": sources.read_from(lab_name, folder.name, REPORT_FILE, "funnel_by_domain"),
            "stages": sources.read_from(lab_name, folder.name, record, "stages[<row>].documents_kept")}


def _dataset(lab: Lab, folder):
    """The dataset built in ``folder`` (its handle, read again only when its manifest changed), or None."""
    from glasslab.data.handle import find_dataset

    return lab.memo("dataset", str(folder), [folder / MANIFEST_FILE], lambda: find_dataset(folder))


def dataset_map(lab: Lab, folder) -> dict[str, Any] | None:
    """The newest finished map (``glasslab data map``) of the dataset in ``folder``, with its folder's name."""
    from glasslab.data.map import MAP_FILE, maps_of

    dataset = _dataset(lab, folder)
    if dataset is None:
        return None
    found = maps_of(lab.root, dataset.manifest_hash)
    summary = lab.json(found[0] / MAP_FILE) if found else None
    return summary | {"folder": found[0].name} if summary else None


def cluster_reads(lab: Lab, map_folder, run_ids: list[str]) -> list[dict[str, Any]]:
    """Per run that trained on the mapped dataset, the tokens it read from each cluster, recomputed from its
    draws (``data/cluster_reads.py``; cached until its store or the map changes), or the line saying why not."""
    reads = []
    for run_id in run_ids:
        folder = lab.index().runs[run_id]
        stamps = tuple(_mtime(folder / name) for name in (METRICS_DB, METRICS_DB + "-wal"))
        try:
            read = _tokens_per_cluster(str(folder), str(map_folder), stamps + (_mtime(map_folder / "map.json"),))
        except (UserError, OSError) as exc:
            read = {"error": str(exc).replace(str(lab.root.resolve()), "<lab>")}
        if read is not None:
            reads.append(read | {"run": run_id})
    return reads


def _mtime(path) -> int:
    return path.stat().st_mtime_ns if path.exists() else 0


@functools.lru_cache(maxsize=64)
def _tokens_per_cluster(run_folder: str, map_folder: str, stamps: tuple) -> dict[str, Any] | None:
    from glasslab.data.cluster_reads import tokens_per_cluster

    return tokens_per_cluster(run_folder, map_folder)


def data_page(lab: Lab, report_id: str) -> dict[str, Any] | None:
    folder = lab.index().reports.get(report_id)
    if folder is None:
        return None
    report = lab.json(folder / REPORT_FILE)
    domains = sorted((report or {}).get("domains") or {})
    runs = [domain_results(lab, r, domains) for r in Relations(lab).runs_using(report_id)] if report else []
    step = lab.json(folder / STEP_RECORD) or {}
    # The step that built it (its function and config): what `glasslab reproduce` builds again.
    built_by = {k: step[k] for k in ("name", "function", "config") if k in step} if "function" in step else None
    if built_by is not None:  # and what it built: a rebuild that differs is told which file first
        dataset = _dataset(lab, folder)
        built_by["manifest"] = dataset.manifest if dataset is not None else None
    build = build_stages(lab, folder)
    mapped = dataset_map(lab, folder)
    if mapped is not None:
        mapped["runs"] = cluster_reads(lab, lab.root / mapped["folder"], Relations(lab).runs_using(report_id))
    return clean({"page": "data", "id": report_id, "title": f"Data {report_id}", "report": report,
                  "build": build, "sources": data_sources(lab, folder, build), "runs": runs,
                  "warnings": warnings(report or {}, runs), "map": mapped,
                  "built_by": built_by, "watch": []})
