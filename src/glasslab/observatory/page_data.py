"""The data behind each page, as plain JSON-ready dicts: one builder per page.

The live server answers ``/api/page/<page>`` with these and the static publisher writes the same
dicts into script files, so both sites show the same thing. Builders take ids from the lab scan and
return None for an unknown id (the caller answers 404). Configs and records are redacted; every
string goes to the browser as data and is rendered as text there. The run, ladder, compare and data
pages have their own modules; the overview and provenance pages are here.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from typing import Any

from glasslab.layout import FIT_FILE, RUN_RECORD, STEP_RECORD
from glasslab.observatory.compare_page import compare_page
from glasslab.observatory.data_page import data_page
from glasslab.observatory.lab_scan import Lab, read_redacted
from glasslab.observatory.ladder_page import find_hero, hero_verdict, ladder_page
from glasslab.observatory.run_page import run_page
from glasslab.observatory.runs import run_summary
from glasslab.observatory.series import clean
from glasslab.track.lab_events import read_lab_events

MAX_LAB_EVENTS = 200


def overview_page(lab: Lab) -> dict[str, Any]:
    index = lab.index()
    try:
        lab_events = read_lab_events(lab.root)
    except sqlite3.Error:
        lab_events = []
    about: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in lab_events:
        about[event["subject"]].append(event)
    ladders = []
    for fit_id, folder in index.fits.items():
        fit = lab.json(folder / FIT_FILE) or {}
        rungs = fit.get("rungs") or []
        hero = find_hero(lab, fit)
        runs = [r for rung in rungs for r in rung.get("run_ids") or [] if r in index.runs]
        prediction = (lab.json(index.runs[hero] / RUN_RECORD) or {}).get("prediction") if hero else None
        ladders.append({
            "id": fit_id, "ladder": fit.get("ladder"), "target": fit.get("target"),
            "prediction": prediction or fit.get("prediction"), "hero_run": hero, "rungs": len(rungs),
            "runs": runs + ([hero] if hero else []),
            "verdict": hero_verdict(lab, hero, prediction or fit.get("prediction")),
        })
    steps = []
    for step_id, folder in index.steps.items():
        step = lab.json(folder / STEP_RECORD) or {}
        steps.append({"id": step_id, "name": step.get("name"), "status": step.get("status"),
                      "attempts": step.get("attempts"), "error": step.get("error"),
                      "is_run": step_id in index.runs, "is_report": step_id in index.reports,
                      "is_fit": step_id in index.fits})
    return clean({
        # The lab is named by its folder; "Lab lab" read badly when that folder is called "lab".
        "page": "overview", "title": "Overview", "lab_name": lab.root.resolve().name,
        "runs": [run_summary(lab, run_id, about.get(run_id)) for run_id in index.runs],
        "ladders": ladders, "reports": list(index.reports), "steps": steps,
        "events": lab_events[-MAX_LAB_EVENTS:], "experiments": None, "watch": [],
    })


def provenance_page(lab: Lab, run_id: str) -> dict[str, Any] | None:
    folder = lab.index().runs.get(run_id)
    if folder is None:
        return None
    return clean({"page": "provenance", "id": run_id, "title": f"Provenance {run_id}",
                  "record": read_redacted(folder / RUN_RECORD), "step": read_redacted(folder / STEP_RECORD),
                  "watch": []})


def build_page(lab: Lab, page: str, item_id: str | None = None, **options: Any) -> dict[str, Any] | None:
    """Page data by name; None when the page or id is unknown. Options: ``runs`` and ``keys`` (the
    compare page's view), ``with_series`` (False: the compare page without series, for the static site)."""
    if page == "overview":
        return overview_page(lab)
    if page == "compare":
        return compare_page(lab, options.get("runs"), options.get("keys"), options.get("with_series", True))
    builders = {"run": run_page, "ladder": ladder_page, "data": data_page, "provenance": provenance_page}
    if page not in builders or item_id is None:
        return None
    data = builders[page](lab, item_id)
    if data is None:  # perhaps created since the cached scan: look again before answering 404
        lab.index(fresh=True)
        data = builders[page](lab, item_id)
    return data
