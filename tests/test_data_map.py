"""The data map: every document embedded and clustered, the same map on 1 and 2 workers, bad input in one line."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from cli_runner import run_cli
from data_helpers import build_small
from glasslab.data.map import DOCUMENTS_FILE, check_settings, map_plan, map_step, read_map
from glasslab.data.runner import KILL_TASK_ENV
from glasslab.errors import UserError
from glasslab.lab import Step, run_one_step


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return build_small(tmp_path_factory.mktemp("map-data"))


def _map(dataset: Path, lab: Path, workers: int, **settings):
    return run_one_step(map_plan(dataset, k=5, num_workers=workers, progress=False, **settings), lab)


def test_every_document_is_mapped_the_same_on_one_and_two_workers(dataset, tmp_path, monkeypatch, capfd):
    one = _map(dataset, tmp_path / "a", 1)
    monkeypatch.setenv(KILL_TASK_ENV, "assign/alpha.train.000000000")  # a worker SIGKILLed mid-map: its task reruns
    two = _map(dataset, tmp_path / "b", 2)
    assert "a worker process died during assign" in capfd.readouterr().err
    assert one.folder.name == two.folder.name  # workers are not the map's identity
    table = pq.read_table(one.folder / DOCUMENTS_FILE)
    assert table.equals(pq.read_table(two.folder / DOCUMENTS_FILE))
    summary = read_map(one.folder, dataset)
    clocks = {"seconds": summary["seconds"], "process_cpu_seconds": summary["process_cpu_seconds"]}
    assert summary == read_map(two.folder, dataset) | clocks
    manifest = json.loads((dataset / "manifest.json").read_text())
    documents = sum(d[s]["documents"] for d in manifest["domains"].values() for s in ("train", "eval"))
    assert table.num_rows == documents and not (one.folder / "work").exists()
    rows = table.to_pydict()
    clusters = summary["clusters"]
    assert 2 <= len(clusters) <= 5 and summary["fine_k"] >= len(clusters)
    assert sum(c["documents"] for c in clusters) == summary["documents"] == rows["split"].count("train")
    assert sum(c["share"] for c in clusters) == pytest.approx(1.0, abs=1e-9)
    assert sum(c["heldout_tokens"] for c in clusters) == summary["heldout_tokens"] > 0
    distance = np.array(rows["distance"])
    assert np.all((distance >= -1e-5) & (distance <= 2 + 1e-5))
    for c in clusters:
        assert c["documents"] >= 1 and len(c["terms"]) >= 3 and c["name"]
        assert sum(s["share_of_cluster"] for s in c["sources"].values()) == pytest.approx(1.0)
        members = distance[(np.array(rows["cluster"]) == c["id"]) & (np.array(rows["split"]) == "train")]
        nearest = [r["distance"] for r in c["representatives"]]
        assert nearest == sorted(nearest) and nearest[0] == pytest.approx(members.min(), abs=1e-4)
        for document in c["representatives"] + c["samples"]:
            assert document["excerpt"] and document["provenance"]["file"].endswith(".jsonl")
            assert document["provenance"]["line"] >= 1


def test_clusters_follow_content_not_chance(dataset, tmp_path):
    """Documents nearest a cluster's centroid share its top terms more than documents of other clusters do."""
    summary = read_map(_map(dataset, tmp_path, 1).folder)
    hits = []
    for c in summary["clusters"]:
        terms = {w for w, _ in c["terms"][:5]}
        own = np.mean([any(t in r["excerpt"].lower() for t in terms) for r in c["representatives"]])
        others = np.mean([any(t in r["excerpt"].lower() for t in terms)
                          for o in summary["clusters"] if o["id"] != c["id"] for r in o["representatives"]])
        hits.append(own - others)
    assert np.mean(hits) > 0.1


def test_a_rebuilt_dataset_is_refused(dataset, tmp_path):
    done = _map(dataset, tmp_path / "lab", 1)
    rebuilt = tmp_path / "ds"
    shutil.copytree(dataset, rebuilt)
    manifest = json.loads((rebuilt / "manifest.json").read_text())
    manifest["rebuilt"] = True
    (rebuilt / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="rebuilt"):
        read_map(done.folder, rebuilt)
    planned = map_plan(dataset, k=5, progress=False).config  # planned before the rebuild, run after it
    moved = replace(planned, data=replace(planned.data, data_path=str(rebuilt)))
    with pytest.raises(UserError, match="not the dataset this step was planned on"):
        run_one_step(Step("map", map_step, moved), tmp_path / "lab2")


def test_bad_settings_are_one_line(dataset, tmp_path):
    not_a_model = tmp_path / "folder"
    not_a_model.mkdir()
    for args, expected in ((["--k", "100000"], "--k 100000: expected 2.."),
                           (["--embedder", str(not_a_model)], "not a model")):
        done = run_cli("data", "map", str(dataset), "--lab", str(tmp_path / "lab"), *args)
        assert done.returncode == 2 and expected in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "lab").glob("map-*"))
    cfg = map_plan(dataset, k=2, progress=False).config
    with pytest.raises(UserError, match="domain 'beta' has no training documents"):
        check_settings(cfg, [("alpha", "train", 9), ("alpha", "eval", 1), ("beta", "train", 0), ("beta", "eval", 0)])
