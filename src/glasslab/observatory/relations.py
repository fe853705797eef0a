"""How the things in a lab refer to each other, found in their files: a run's dataset, ladder, parent
(fork), children and exports, the runs that used a dataset, and the command that recreates a run.

Every link is read defensively: a field that is absent, names nothing in the lab, or has another
shape gives no link (the page hides it) rather than an error. What each field may look like:

- ``run.json``: ``parent`` = {``run`` (folder name), ``run_dir``, ``step``} for a fork; ``role``
  (rung, hero, sft, …) and ``ladder`` (the ladder's name, as in ``fit.json``); ``dataset`` (the data
  step's folder name or id); ``data_manifest_hash``; ``command`` (argv list or string, when recorded).
- ``step.json``: ``dependencies`` ({name: folder}); an export step's ``config`` names its source run
  (``run``, ``step``, also under ``source``); ``command`` when recorded.
- an export folder holds its manifest (``layout.EXPORT_MANIFEST``) with e.g. the max logit difference
  measured at export.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from glasslab.layout import EXPORT_MANIFEST, FIT_FILE, REPORT_FILE, RUN_RECORD, STEP_RECORD
from glasslab.observatory.lab_scan import Lab, read_redacted

EXPORT_PREFIX = "export-"
CONFIG_FILE = "run-config.json"  # what the reproduce box asks the reader to save the config as (not a lab file)


class Relations:
    """Links between a lab's runs, steps, data reports and ladder fits (one scan, files cached)."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.index = lab.index()
        self._names = {folder.name: run_id for run_id, folder in self.index.runs.items()}

    def record(self, run_id: str) -> dict[str, Any]:
        folder = self.index.runs.get(run_id)
        return (self.lab.json(folder / RUN_RECORD) or {}) if folder else {}

    def step(self, step_id: str) -> dict[str, Any]:
        folder = self.index.steps.get(step_id) or self.index.runs.get(step_id)
        return (self.lab.json(folder / STEP_RECORD) or {}) if folder else {}

    def run_id(self, ref: Any) -> str | None:
        """The id of the run ``ref`` names (an id, a folder name or a path ending in one), or None."""
        if not isinstance(ref, str) or not ref:
            return None
        if ref in self.index.runs:
            return ref
        return self._names.get(Path(ref).name)

    def parent(self, run_id: str) -> dict[str, Any] | None:
        """``{run, step, name}`` of the run this one was forked from; ``run`` is None when the parent is
        not in this lab (it is then named, not linked)."""
        parent = self.record(run_id).get("parent")
        if not isinstance(parent, dict):
            return None
        parent_id = self.run_id(parent.get("run")) or self.run_id(parent.get("run_dir"))
        name = parent.get("run") or parent.get("run_dir")
        return {"run": parent_id, "name": str(name) if name else None, "step": _int(parent.get("step"))}

    def children(self, run_id: str) -> list[dict[str, Any]]:
        """Runs forked from this one, as ``{run, step}`` in step order."""
        found = []
        for other in self.index.runs:
            parent = self.parent(other) if other != run_id else None
            if parent and parent["run"] == run_id:
                found.append({"run": other, "step": parent["step"]})
        return sorted(found, key=lambda c: (c["step"] is None, c["step"] or 0, c["run"]))

    def exports(self, run_id: str) -> list[dict[str, Any]]:
        """Export steps whose config names this run: ``{id, step, status, manifest}``."""
        folder_name = self.index.runs[run_id].name
        found = []
        for step_id, folder in self.index.steps.items():
            if not folder.name.startswith(EXPORT_PREFIX):
                continue
            record = self.lab.json(folder / STEP_RECORD) or {}
            config = record.get("config") if isinstance(record.get("config"), dict) else {}
            source = config.get("source") if isinstance(config.get("source"), dict) else config
            if source.get("run") not in (run_id, folder_name) and self.run_id(source.get("run")) != run_id:
                continue
            manifest = self.lab.json(folder / EXPORT_MANIFEST)
            found.append({"id": step_id, "step": _int(source.get("step")), "status": record.get("status"),
                          "manifest": manifest})
        return found

    def dataset(self, run_id: str) -> str | None:
        """The data report this run trained on: ``run.json`` ``dataset``, else a dependency of its
        step that holds a report, else the report with the run's data manifest hash."""
        record = self.record(run_id)
        named = record.get("dataset")
        if isinstance(named, dict):
            named = named.get("id") or named.get("run") or named.get("folder")
        for candidate in (named, *_values(self.step(run_id).get("dependencies"))):
            report = self._report_id(candidate)
            if report:
                return report
        manifest = record.get("data_manifest_hash")
        if isinstance(manifest, str) and manifest:
            for report_id, folder in self.index.reports.items():
                if (self.lab.json(folder / REPORT_FILE) or {}).get("manifest_hash") == manifest:
                    return report_id
        return None

    def _report_id(self, ref: Any) -> str | None:
        if not isinstance(ref, str) or not ref:
            return None
        if ref in self.index.reports:
            return ref
        name = Path(ref).name
        return next((r for r, folder in self.index.reports.items() if folder.name == name), None)

    def runs_using(self, report_id: str) -> list[str]:
        """Runs whose dataset (as :meth:`dataset` finds it) is ``report_id``."""
        return [r for r in self.index.runs if self.dataset(r) == report_id]

    def ladder(self, run_id: str) -> str | None:
        """The fit whose ladder this run belongs to (a rung or the hero), by the ladder's name."""
        name = self.record(run_id).get("ladder")
        if not name:
            return None
        for fit_id, folder in self.index.fits.items():
            if (self.lab.json(folder / FIT_FILE) or {}).get("ladder") == name:
                return fit_id
        return None

    def reproduce(self, run_id: str) -> dict[str, Any]:
        """What recreates the run: the commit to check out, then the command recorded with the run
        when there is one, else ``glasslab train`` of its resolved config (shown beside the box) with
        the dataset and the fork point filled in from the lab's files."""
        record = self.record(run_id)
        step = self.step(run_id)
        code = record.get("code") if isinstance(record.get("code"), dict) else step.get("code_version")
        code = code if isinstance(code, dict) else {}
        config = (read_redacted(self.index.runs[run_id] / RUN_RECORD) or {}).get("config")
        commands = [f"git checkout {code['commit']}"] if code.get("commit") else []
        recorded = record.get("command") or step.get("command")
        if isinstance(recorded, list):
            recorded = shlex.join(str(a) for a in recorded)
        if isinstance(recorded, str) and recorded:
            commands.append(recorded)
        else:
            lab_name = self.lab.root.resolve().name
            words = ["glasslab", "train", CONFIG_FILE]
            dataset = self.dataset(run_id)
            if dataset:  # the recorded path may be absolute, on another machine
                words.append(f"data.path={lab_name}/{dataset}")
            parent = self.parent(run_id)
            if parent and parent["name"] and parent["step"] is not None:
                words += ["--fork", f"{Path(parent['name']).name}@{parent['step']}"]
            commands.append(shlex.join([*words, "--lab", lab_name]))
        return {"commands": commands, "recorded": isinstance(recorded, str) and bool(recorded),
                "commit": code.get("commit"), "dirty": bool(code.get("dirty")), "diff_sha256": code.get("diff_sha256"),
                "step_name": step.get("name"), "function": step.get("function"), "config": config}


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _values(mapping: Any) -> list[Any]:
    return list(mapping.values()) if isinstance(mapping, dict) else []
