"""A published lab is a record others can check: no local path or host name in the site or an export."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

from glasslab.data.handle import dataset_trained_on
from glasslab.layout import EXPORT_MANIFEST, STEP_RECORD, read_json, write_json_atomic
from glasslab.model.export import copy_export
from glasslab.model.load import find_model
from glasslab.observatory.publish import publish
from glasslab.public import Publicizer

HIDDEN_DIR = "where-the-demo-lab-lived"  # conftest's demo lab lives under a folder of this name


def _leaks(text: str, root: Path, hosts: set[str]) -> list[str]:
    """What in ``text`` names the lab's place on disk or a machine it ran on."""
    found = [s for s in (HIDDEN_DIR, str(root.resolve().parent), str(root.parent)) if s in text]
    found += [h for h in hosts if re.search(rf"\b{re.escape(h)}\b", text)]
    return found + (['"host":'] if re.search(r'"host"\s*:', text) else [])


def _hosts(lab: Path) -> set[str]:
    hosts = {socket.gethostname()}
    hosts |= {(read_json(p) or {}).get("host") for p in lab.glob(f"*/{STEP_RECORD}")} - {None}
    return hosts


def test_the_published_site_names_no_local_path_and_no_host(demo_lab, tmp_path):
    lab = demo_lab.root
    assert HIDDEN_DIR in str(lab)
    hosts = _hosts(lab)
    raw = (next(lab.glob("demo-hero-*")) / "run.json").read_text()
    assert str(lab.resolve()) in raw and '"host"' in raw  # the record on disk says both, and stays as written
    site = tmp_path / "site"
    publish(lab, site)
    pages = [p for p in site.rglob("*") if p.is_file() and p.suffix in (".html", ".js", ".json")
             and p.parent.name != "static"]
    assert len(pages) > 20
    leaks = {p.name: found for p in pages if (found := _leaks(p.read_text(encoding="utf-8"), lab, hosts))}
    assert not leaks
    # The run page still names its dataset, by folder name below the lab and manifest hash.
    hero_page = next(p for p in (site / "data").glob("run-demo-hero-*.js"))
    data = json.loads(hero_page.read_text().split("=", 1)[1].rstrip().rstrip(";"))
    dataset = data["record"]["dataset"]
    assert dataset["path"] == f"lab/{dataset['folder']}" and len(dataset["manifest_hash"]) == 64
    assert data["record"]["config"]["data"]["path"] == f"lab/{dataset['folder']}"
    # It lists the checkpoints kept on the published schedule, each with its hashes and export command.
    hero = data["id"]
    final = json.loads((lab / hero / "result.json").read_text())["step"]
    steps = [c["step"] for c in data["checkpoints"]]
    assert steps[:4] == [0, 1, 2, 4] and steps[-1] == final
    assert all(c["command"] == f"glasslab export {hero}@{c['step']}" and len(c["weights_sha256"]) == 64
               for c in data["checkpoints"])


def test_an_export_names_its_dataset_by_folder_and_hash_and_no_local_path(demo_lab, tmp_path):
    lab = demo_lab.root
    hero = next(lab.glob("demo-hero-*"))
    (export,) = [p for p in lab.glob("export-*")
                 if (read_json(p / STEP_RECORD) or {}).get("config", {}).get("run") == hero.name]
    given = tmp_path / "given"
    manifest = copy_export(export, given)
    hosts = _hosts(lab)
    for name in manifest["files"]:
        if name.endswith((".json", ".md")):
            assert not _leaks((given / name).read_text(encoding="utf-8"), lab, hosts), name
    assert not _leaks((given / EXPORT_MANIFEST).read_text(encoding="utf-8"), lab, hosts)
    dataset = lab / manifest["dataset"]
    assert "dataset_path" not in manifest and manifest["dataset_manifest_hash"] == read_json(
        dataset / "report.json")["manifest_hash"]
    # Found again in the lab by folder name and manifest hash; another dataset of that name is not it.
    assert dataset_trained_on(find_model(str(given), lab)) == dataset
    write_json_atomic(given / EXPORT_MANIFEST, {**manifest, "dataset_manifest_hash": "0" * 64})
    assert dataset_trained_on(find_model(str(given), lab)) is None


def test_paths_become_the_labs_name_and_below_and_hosts_go():
    public = Publicizer("/srv/me/lab", hosts=["box7"])
    record = {"host": "box7", "config": {"data": {"path": "/srv/me/lab/data-1a2b"}},
              "parent": {"run_dir": "/srv/me/lab/run-x", "run": "run-x"},
              "note": "trained on box7 from /home/me/corpus/web.jsonl; see http://127.0.0.1:8765/run/run-x",
              "sample": "</script> a/b 1/2 /usr", "home": "~/corpus/web.jsonl",
              "metrics": {"eval/macro/loss": 3.2, "throughput/tokens_per_second": 10}}
    assert public.data(record) == {
        "config": {"data": {"path": "lab/data-1a2b"}}, "parent": {"run_dir": "lab/run-x", "run": "run-x"},
        "note": "trained on <host> from web.jsonl; see http://127.0.0.1:8765/run/run-x",
        "sample": "</script> a/b 1/2 /usr", "home": "web.jsonl",
        "metrics": {"eval/macro/loss": 3.2, "throughput/tokens_per_second": 10}}
