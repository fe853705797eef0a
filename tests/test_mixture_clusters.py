"""Mixtures by content cluster: buckets inside the domain streams, drawn deterministically, resumed exactly,
rebuilt by ``glasslab batch``; the tokens a run read per cluster recomputed exactly; a mixture without cluster
keys hashes and draws as before."""

from __future__ import annotations

import io
import json
import math
import re
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from glasslab import track
from glasslab.cli import main as cli_main
from glasslab.config import config_hash, from_dict, to_dict
from glasslab.data.batches import rebuild_batch
from glasslab.data.buckets import map_clusters
from glasslab.data.build import build_step
from glasslab.data.cluster_heldout import MIN_HELDOUT_TOKENS, OTHER, cluster_heldout
from glasslab.data.cluster_reads import tokens_per_cluster
from glasslab.data.config import DataConfig, MixtureConfig
from glasslab.data.loader import Loader
from glasslab.data.map import DOCUMENTS_FILE, map_after, map_plan
from glasslab.data.reference import DatasetRef
from glasslab.errors import UserError
from glasslab.lab import Executor, Step, output_of, planned_folder_name, run_one_step
from glasslab.lab.pool import InlinePool
from glasslab.model import Transformer
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.ladder_page import ladder_page
from glasslab.observatory.run_page import run_page
from glasslab.reproduce.replay import map_overrides
from glasslab.track import RunReader
from glasslab.train.callbacks import StopAfter
from glasslab.train.cluster_evals import cluster_evals_record, with_cluster_evals
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from glasslab.train.steps import TrainStepConfig, train_step
from observatory_lab import chromium_path, serve_lab
from train_data import build_tiny_dataset, tiny_build_config, tiny_run_config


@pytest.fixture(scope="module")
def mapped(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny training dataset and a map of it into 4 content clusters, beside it in one lab."""
    root = tmp_path_factory.mktemp("mix-clusters")
    dataset = build_tiny_dataset(root)
    done = run_one_step(map_plan(dataset, k=4, num_workers=1, progress=False), root)
    return dataset, done.folder


def _data(dataset: Path, folder: Path, **mixture) -> DataConfig:
    return DataConfig(path=str(dataset), map=folder.name, mixture=MixtureConfig(**mixture))


def _draw(loader: Loader, steps: int) -> list[torch.Tensor]:
    return [loader.next_batch() for _ in range(steps)]


def test_a_mixture_without_cluster_keys_hashes_and_draws_as_before(mapped):
    dataset, _ = mapped
    plain = DataConfig(path=str(dataset), mixture=MixtureConfig(weights={"code": 0.5, "prose": 0.5}))
    hashed = to_dict(plain, versioned_only=True)
    assert "map" not in hashed and "clusters" not in hashed["mixture"]  # no existing run's identity moves
    assert config_hash(plain) != config_hash(replace(plain, map="map-x", mixture=replace(
        plain.mixture, clusters={"*": 1.0})))
    loader = Loader(plain, seq_len=32, global_batch=8, prefetch=False)
    assert [b.name for b in loader.buckets.buckets] == ["code", "prose"] and not loader.buckets.left_out


def test_uniform_over_clusters_draws_each_bucket_from_its_cluster_and_resumes_exactly(mapped):
    dataset, folder = mapped
    cfg = _data(dataset, folder, clusters={"*": 1.0})
    clusters = map_clusters(cfg)
    loader = Loader(cfg, seq_len=32, global_batch=8)
    names = [b.name for b in loader.buckets.buckets]
    assert len(names) >= 4 and all("/" in n for n in names) and loader.domains == ["code", "prose"]
    # Uniform over clusters: each cluster's weights sum to 1/K over the domains holding it.
    per_cluster: dict[int, float] = {}
    for bucket in loader.buckets.buckets:
        per_cluster[bucket.cluster] = per_cluster.get(bucket.cluster, 0.0) + loader.buckets.weights_at(0)[bucket.name]
    assert sorted(per_cluster) == list(range(4)) and all(w == pytest.approx(0.25) for w in per_cluster.values())
    seen = set()
    for _ in range(20):
        for bucket, position in loader.next_plan():
            domain, cluster = bucket.split("/")
            documents = [d for d, _, _ in loader.row_documents(bucket, position)]
            assert set(clusters.cluster_of[domain][documents]) == {int(cluster)}
            seen.add(bucket)
        loader.skip(1)
    assert seen == set(names)  # every bucket is drawn
    first = Loader(cfg, seq_len=32, global_batch=8)
    _draw(first, 5)
    state = json.loads(json.dumps(first.state_dict()))
    expected = _draw(first, 40)
    resumed = Loader(cfg, seq_len=32, global_batch=8)
    resumed.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(expected, _draw(resumed, 40), strict=True))


def test_clusters_within_domains_keep_the_domain_weights(mapped):
    dataset, folder = mapped
    uniform = Loader(_data(dataset, folder, weights={"code": 0.75, "prose": 0.25}, clusters={"*": 1.0}), 32, 8,
                     prefetch=False)
    code = [b.cluster for b in uniform.buckets.buckets if b.domain == "code"]
    assert len(code) >= 2  # the tiny code domain spans several clusters
    favoured = code[0]
    loader = Loader(_data(dataset, folder, weights={"code": 0.75, "prose": 0.25},
                          clusters={str(favoured): 3.0, "*": 1.0}), seq_len=32, global_batch=8, prefetch=False)
    assert loader.weights_at(0) == pytest.approx({"code": 0.75, "prose": 0.25})
    weights = {b.cluster: loader.buckets.weights_at(0)[b.name] for b in loader.buckets.buckets if b.domain == "code"}
    assert weights[favoured] == pytest.approx(3 * weights[code[1]])
    assert sum(weights.values()) == pytest.approx(0.75)


def test_the_tokens_read_per_document_are_exactly_the_windows_drawn(mapped):
    dataset, folder = mapped
    for mixture in ({"weights": {"code": 0.5, "prose": 0.5}}, {"clusters": {"*": 1.0}}):
        loader = Loader(_data(dataset, folder, **mixture), seq_len=32, global_batch=8, prefetch=False)
        counted = {d: np.zeros(len(loader.tokens_read()[d]), np.int64) for d in loader.domains}
        for _ in range(60):  # past an epoch of the smaller buckets
            for bucket, position in loader.next_plan():
                for document, _, tokens in loader.row_documents(bucket, position):
                    counted[loader.domain_of(bucket)][document] += len(tokens)
            loader.skip(1)
        read = loader.tokens_read()
        for domain in loader.domains:
            assert np.array_equal(read[domain], counted[domain]), domain
        assert sum(int(r.sum()) for r in read.values()) == 60 * 8 * 33


def test_bad_cluster_keys_are_one_line(mapped):
    dataset, folder = mapped
    with pytest.raises(UserError, match=r"data.mixture.clusters: 'no-such-thing' names no cluster"):
        Loader(_data(dataset, folder, clusters={"no-such-thing": 1.0}), seq_len=32, global_batch=8)
    with pytest.raises(UserError, match=r"both name cluster 1"):
        name = map_clusters(_data(dataset, folder)).summary["clusters"][1]["name"]
        Loader(_data(dataset, folder, clusters={"1": 1.0, name: 2.0}), seq_len=32, global_batch=8)
    with pytest.raises(UserError, match=r"data.map='map-gone'"):
        Loader(DataConfig(path=str(dataset), map="map-gone", mixture=MixtureConfig(clusters={"*": 1.0})), 32, 8)
    with pytest.raises(UserError, match=r"data.mixture.clusters.*a data.map"):
        from_dict(DataConfig, {"path": str(dataset), "mixture": {"clusters": {"*": 1}}})


@pytest.fixture(scope="module")
def runs(mapped) -> dict[str, Path]:
    """A run by cluster (uniform over clusters; its held-out loss measured per cluster too) trained whole, and
    again stopped at step 4 and resumed, in the map's lab."""
    dataset, folder = mapped
    config = tiny_run_config(dataset, max_steps=8, checkpoint_interval=4, sample_prompts=[], eval_interval=4,
                             eval_max_tokens=4096)
    config["data"] = {"path": str(dataset), "map": folder.name, "mixture": {"clusters": {"*": 1.0}}}
    run_cfg = from_dict(RunConfig, config)
    whole, halves = folder.parent / "whole", folder.parent / "halves"
    train(run_cfg, whole)
    train(run_cfg, halves, callbacks=[StopAfter(4)])
    train(run_cfg, halves, resume=True)
    return {"whole": whole, "halves": halves, "map": folder}


def test_a_run_by_cluster_resumes_bit_for_bit_and_its_batches_and_cluster_tokens_are_rebuilt(runs):
    losses = []
    for run in (runs["whole"], runs["halves"]):
        with RunReader(run) as reader:
            losses.append(reader.scalars("train/loss")[1])
    assert len(losses[0]) == 8 and losses[0] == losses[1]
    assert all(rebuild_batch(runs["halves"], step).matches for step in range(1, 9))
    record = json.loads((runs["whole"] / "run.json").read_text())
    assert set(record["mixture"]["total"]["tokens"]) == {b for b in record["mixture"]["phases"][0]["weights"]}
    read = tokens_per_cluster(runs["halves"], runs["map"])
    assert read["step"] == 8 and read["total"] == 8 * 8 * 33 and len(read["tokens"]) == 4
    assert read == tokens_per_cluster(runs["whole"], runs["map"]) | {"run": "halves"}


def test_reproduce_maps_the_dataset_again_for_a_run_by_cluster(runs, tmp_path):
    record = json.loads((runs["whole"] / "run.json").read_text())
    assert record["data_map"]["folder"] == runs["map"].name and record["data_map"]["config"]["k"] == 4
    dataset = tmp_path / "lab" / "data"
    shutil.copytree(runs["map"].parent / "data", dataset)  # a lab that has the dataset but not its map
    assert record["cluster_evals"]["map"] == runs["map"].name and record["cluster_evals"]["map_config"]["k"] == 4
    assert not map_overrides(SimpleNamespace(record=record, run_id="whole"), dataset)  # made under the same name
    again = dataset.parent / runs["map"].name
    assert pq.read_table(again / DOCUMENTS_FILE).equals(pq.read_table(runs["map"] / DOCUMENTS_FILE))
    buckets = [Loader(_data(d, folder, clusters={"*": 1.0}), 32, 8, prefetch=False).buckets.buckets
               for d, folder in ((dataset, again), (runs["map"].parent / "data", runs["map"]))]
    assert [(b.name, b.tokens) for b in buckets[0]] == [(b.name, b.tokens) for b in buckets[1]]


def test_a_run_by_a_map_planned_in_its_dag_reproduces_bit_for_bit_in_another_lab(tmp_path, capsys):
    """A DAG: the data build, its map (``map_after``: the recorded map config names ``data_from``), and a run by
    cluster of that map whose held-out loss is measured per cluster too (``eval_map``: a reference the executor
    resolves). ``glasslab reproduce`` of it in an empty lab builds the data, maps the dataset's folder again (the
    same clusters under another folder name) and replays every checkpoint bit for bit."""
    data = Step("data", build_step, tiny_build_config())
    data_map = map_after(data, k=4, num_workers=1, progress=False)
    config = tiny_run_config(Path("unused"), max_steps=4, checkpoint_interval=2, sample_prompts=[],
                             eval_max_tokens=256)
    config["data"] = {"map": planned_folder_name(data_map), "mixture": {"clusters": {"*": 1.0}}}
    run = Step("by-cluster", train_step, TrainStepConfig(run=from_dict(RunConfig, config),
                                                         data=DatasetRef.of_build(data), eval_map=output_of(data_map)))
    report = Executor(tmp_path / "lab", backend=InlinePool(), echo=False).run([data, data_map, run])
    assert report.ok, report.outcomes
    folder = next(n.folder for n in report.plan.steps if n.name == "by-cluster")
    record = json.loads((folder / "run.json").read_text())
    assert record["cluster_evals"]["map"] == record["config"]["train"]["eval_map"] == planned_folder_name(data_map)
    assert record["data_map"]["config"]["data_from"] == "data"
    assert cli_main(["reproduce", str(folder), "--lab", str(tmp_path / "again")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\b(\d+) of \1 published checkpoints bit-identical", out) and "tolerance" not in out, out
    (again,) = (tmp_path / "again").glob("map-*")
    assert again.name != planned_folder_name(data_map)
    original = tmp_path / "lab" / planned_folder_name(data_map) / DOCUMENTS_FILE
    assert pq.read_table(again / DOCUMENTS_FILE).equals(pq.read_table(original))
    # A run that names the map for its evals only (the demo's hero): its record's eval map config is made again.
    evals_only = {**record, "data_map": None, "config": {**record["config"], "data": {}}}
    dataset = next((tmp_path / "again").glob("data-*"))
    assert map_overrides(SimpleNamespace(record=evals_only, run_id="hero"), dataset) == [f"train.eval_map={again.name}"]


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
def test_the_data_page_shows_the_tokens_each_run_read_per_cluster(runs, page, tmp_path):
    read = tokens_per_cluster(runs["whole"], runs["map"])
    with serve_lab(runs["map"].parent) as server:
        page.goto(f"{server.url}/data/data")
        page.wait_for_selector("body[data-ready='1']")
        table = page.locator(".map-run-table")
        assert table.locator("tr[data-run]").count() == 2
        assert f"{read['total']:,}" in table.locator("tr[data-run='whole']").inner_text()
        page.locator(".map-disc[data-cluster='0']").dispatch_event("click")
        row = page.locator("#map-detail .map-runs tr[data-run='whole']")
        assert f"{read['tokens'][0]:,}" in row.inner_text()
        page.locator("#map-detail").screenshot(path=tmp_path / "cluster-0-detail.png")  # kept to look at


def test_the_held_out_loss_is_measured_per_cluster_and_small_clusters_are_merged_and_said(runs):
    record = json.loads((runs["whole"] / "run.json").read_text())["cluster_evals"]
    assert record["map"] == runs["map"].name and record["min_tokens"] == MIN_HELDOUT_TOKENS and record["every"] == 1
    measured = sorted(record["clusters"])
    assert measured and all(n >= MIN_HELDOUT_TOKENS for n in record["clusters"].values())
    alone = [int(c) for c in measured if c != OTHER]
    assert sorted(alone + [int(c) for c in [*record["merged"], *record["skipped"]]]) == list(range(4))
    heldout = cluster_heldout(runs["map"].parent / "data", runs["map"], 32, 4096)
    with RunReader(runs["whole"]) as reader:
        for cluster in measured:
            steps, losses = reader.scalars(f"eval/cluster/{cluster}/loss")
            _, bpb = reader.scalars(f"eval/cluster/{cluster}/bpb")
            assert steps == [4, 8] and losses[-1] < losses[0]  # it learns
            assert bpb[-1] == pytest.approx(losses[-1] / math.log(2) / heldout.bytes_per_token[cluster])
        assert not reader.scalars(f"eval/cluster/{max(alone) + 4}/loss")[0]
        macro = reader.scalars("eval/macro/loss")[1][-1]
        domains = [reader.scalars(f"eval/{d}/loss")[1][-1] for d in ("code", "prose")]
        assert macro == pytest.approx(sum(domains) / 2)  # the ladder's target leaves the clusters out
    data = runs["map"].parent / "data"
    everything_skipped = cluster_heldout(data, runs["map"], 32, 4096, min_tokens=10**9)
    assert not everything_skipped.windows and sorted(everything_skipped.skipped) == list(range(4))


def test_clusters_too_small_alone_are_measured_together_as_other(mapped, tmp_path):
    dataset, folder = mapped
    spread = _held_out_dealt_over_clusters(folder, tmp_path)
    alone = cluster_heldout(dataset, spread, 32, 0, min_tokens=10**9).skipped  # each cluster's targets alone
    assert sorted(alone) == list(range(4)) and min(alone.values()) > 0
    floor = sorted(alone.values())[1] + 1  # above the two smallest clusters
    heldout = cluster_heldout(dataset, spread, 32, 0, min_tokens=floor)
    small = {c: n for c, n in alone.items() if n < floor}
    assert len(small) == 2 and heldout.merged == small and not heldout.skipped
    assert sorted(heldout.windows) == sorted([str(c) for c in alone if c not in small] + [OTHER])
    together = heldout.record()["clusters"][OTHER]  # all of their held-out tokens (cut into windows once)
    assert together >= floor and abs(together - sum(small.values())) <= 33 * (len(small) + 1)
    assert heldout.record()["merged"] == {str(c): n for c, n in small.items()}


def _held_out_dealt_over_clusters(folder: Path, tmp_path: Path) -> Path:
    """A copy of the map with its held-out documents dealt in turn to its 4 clusters (the tiny data's held-out
    split falls in one)."""
    import pyarrow as pa

    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    table = pq.read_table(copy / DOCUMENTS_FILE)
    held_out = np.cumsum(np.array(table["split"].to_pylist()) == "eval") - 1
    clusters = np.where(np.array(table["split"].to_pylist()) == "eval", held_out % 4, table["cluster"].to_numpy())
    column = table.schema.get_field_index("cluster")
    dealt = table.set_column(column, "cluster", pa.array(clusters, table["cluster"].type))
    pq.write_table(dealt, copy / DOCUMENTS_FILE)
    return copy


def test_the_clusters_are_measured_at_every_nth_evaluation_and_the_last(runs):
    dataset, folder = runs["map"].parent / "data", runs["map"]
    config = tiny_run_config(dataset, max_steps=8, eval_interval=2, cluster_eval_every=2, eval_map=folder.name,
                             eval_max_tokens=4096)
    run_cfg = from_dict(RunConfig, config)
    evaluate = with_cluster_evals(lambda model, step: {"eval/macro/loss": 0.0}, run_cfg, torch.device("cpu"))
    model = Transformer(run_cfg.model)
    measured = [step for step in (2, 4, 6, 8) if any(k.startswith("eval/cluster/") for k in evaluate(model, step))]
    assert measured == [4, 8]
    assert cluster_evals_record(run_cfg)["cluster_evals"]["every"] == 2


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
def test_the_run_page_draws_a_cluster_by_step_heatmap(runs, page, tmp_path):
    with serve_lab(runs["map"].parent) as server:
        heat = _cluster_heatmap(page, f"{server.url}/run/whole")
        assert heat.locator(".heat-ytitle").inner_text() == "cluster"
        measured = int(min(json.loads((runs["whole"] / "run.json").read_text())["cluster_evals"]["clusters"]))
        name = map_clusters(_data(runs["map"].parent / "data", runs["map"])).summary["clusters"][measured]["name"]
        assert f"{measured} {name}" in heat.locator(".heat-yaxis").inner_text()  # rows named by their top terms
        assert page.evaluate("t => window.GLASSLAB_HEATMAPS[t].steps", HEATMAP) == [4, 8]
        assert heat.locator(".heat-xaxis").inner_text().split() == ["4", "8"]  # each column's step, once
        _check_axes(heat)
        png = _screenshots(heat, tmp_path)
    assert _inked(png) > 0.9


HEATMAP = "Held-out loss per content cluster (the data map)"


def _cluster_heatmap(page, url: str):
    """The run page at ``url``, scrolled to its cluster × step heatmap, drawn."""
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']")
    card = page.locator(f"[data-panel='{HEATMAP}']")
    card.scroll_into_view_if_needed()
    heat = card.locator(".heat")
    heat.wait_for()
    return heat


def _check_axes(heat) -> None:
    """Every row label whole inside the heatmap (a cluster's name is wider than an expert's number) and no two
    step labels on top of each other."""
    box = heat.bounding_box()
    for tick in heat.locator(".heat-yaxis .heat-tick").all():
        label = tick.bounding_box()
        assert label["x"] >= box["x"] and tick.evaluate("t => t.scrollWidth <= t.clientWidth"), tick.inner_text()
    steps = sorted((t.bounding_box() for t in heat.locator(".heat-xaxis .heat-tick").all()), key=lambda b: b["x"])
    assert all(a["x"] + a["width"] <= b["x"] for a, b in zip(steps, steps[1:], strict=False)), steps


def _screenshots(heat, folder: Path) -> bytes:
    """The heatmap's cells (returned) and the whole heatmap with its axes, both kept in ``folder`` to look at."""
    heat.screenshot(path=folder / "heatmap.png")
    return heat.locator("canvas.heat-cells").screenshot(path=folder / "heatmap-cells.png")


def _inked(png: bytes) -> float:
    """The share of a screenshot's pixels that are not white, once it holds more than one colour."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        rgb = image.convert("RGB").tobytes()
    pixels = [rgb[i : i + 3] for i in range(0, len(rgb), 3)]
    assert len(set(pixels)) >= 2  # a colour per cell
    return sum(p != b"\xff\xff\xff" for p in pixels) / len(pixels)



HERO_ALONE = [0, 1, 2, 4, 7, 11, 16, 21, 24]
"""As the demo's hero: 9 clusters of 36 measured alone, the other 27 merged into ``other``."""


@pytest.fixture
def hero_shaped(tmp_path) -> Path:
    """A lab with a run shaped like the demo's hero: 21 evaluations, the clusters measured at every 5th, 9
    clusters alone and the merged row; and its map's names."""
    lab = tmp_path / "lab"
    rows = [*map(str, HERO_ALONE), OTHER]
    merged = {str(c): 300 for c in range(36) if c not in HERO_ALONE}
    run = track.init(lab / "demo-hero", {"name": "demo-hero"}, record_extra={"cluster_evals": {
        "map": "map-0000aaaa", "min_tokens": MIN_HELDOUT_TOKENS, "clusters": dict.fromkeys(rows, 4000),
        "merged": merged, "skipped": {}, "every": 5}})
    for evaluation in range(21):
        metrics = {"train/loss": 6.0 - 0.1 * evaluation, "eval/macro/loss": 6.0 - 0.1 * evaluation}
        if evaluation % 5 == 0:
            metrics |= {f"eval/cluster/{r}/loss": 6.0 - 0.1 * evaluation + 0.2 * i for i, r in enumerate(rows)}
        run.log(metrics, 40 * evaluation)
    run.finish()
    (lab / "map-0000aaaa").mkdir()
    (lab / "map-0000aaaa" / "map.json").write_text(json.dumps({"clusters": [
        {"id": c, "name": f"term{c} · word{c}"} for c in range(36)]}))
    return lab


def test_the_page_data_of_a_run_shaped_like_the_demo_hero_names_its_rows_and_the_merged_row(hero_shaped):
    data = run_page(Lab(hero_shaped), "demo-hero")
    chart = next(c for c in data["charts"] if c["id"] == HEATMAP)
    assert chart["family"]["rows"] == [*HERO_ALONE, OTHER]  # the merged row last
    assert data["cluster_rows"][OTHER] == "other (27 clusters)" and data["cluster_rows"]["7"] == "7 term7 · word7"


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
def test_the_heatmap_of_a_run_shaped_like_the_demo_hero_has_a_row_per_cluster_and_the_merged_row(hero_shaped,
                                                                                                  page, tmp_path):
    with serve_lab(hero_shaped) as server:
        heat = _cluster_heatmap(page, f"{server.url}/run/demo-hero")
        labels = heat.locator(".heat-yaxis").inner_text()
        assert "7 term7 · word7" in labels and "other (27 clusters)" in labels and "term3 " not in labels
        drawn = page.evaluate("t => window.GLASSLAB_HEATMAPS[t]", HEATMAP)
        assert drawn["steps"] == [0, 200, 400, 600, 800] and len(drawn["values"][0]) == 10
        assert drawn["values"][-1][-1] == pytest.approx(4.0 + 0.2 * 9)  # the merged row last, at the last step
        _check_axes(heat)
        png = _screenshots(heat, tmp_path)
    assert _inked(png) > 0.9


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
def test_the_ladder_page_draws_each_clusters_loss_against_compute(tmp_path, page):
    """Two rungs (the small one with two seeds) that measured three clusters: cluster 2 improves with
    scale, cluster 1 stays flat; the page says so in its chart and its table."""
    lab = tmp_path / "lab"
    losses = {"rung-s-a1": {0: 4.0, 1: 3.0, 2: 5.0}, "rung-s-a2": {0: 4.2, 1: 3.0, 2: 5.2},
              "rung-m-b1": {0: 3.6, 1: 3.0, 2: 4.0}}
    for name, by_cluster in losses.items():
        run = track.init(lab / name, {"name": name}, record_extra={"cluster_evals": {"map": "map-0000aaaa"}})
        run.log({"train/loss": 5.0, **{f"eval/cluster/{c}/loss": v + 1 for c, v in by_cluster.items()}}, 1)
        run.log({"train/loss": 4.0, **{f"eval/cluster/{c}/loss": v for c, v in by_cluster.items()}}, 2)
        run.finish()
    (lab / "map-0000aaaa").mkdir()
    (lab / "map-0000aaaa" / "map.json").write_text(json.dumps({"clusters": [
        {"id": 0, "name": "def · self"}, {"id": 1, "name": "table · row"}, {"id": 2, "name": "the · of"}]}))
    (lab / "ladder-cccc3333").mkdir()
    (lab / "ladder-cccc3333" / "fit.json").write_text(json.dumps({"ladder": "demo", "rungs": [
        {"name": "rung-s", "run_ids": ["rung-s-a1", "rung-s-a2"], "flops": 1e12, "losses": [4.0, 4.1]},
        {"name": "rung-m", "run_ids": ["rung-m-b1"], "flops": 4e12, "losses": [3.7]}]}))
    data = ladder_page(Lab(lab), "ladder-cccc3333")["clusters"]
    assert data["names"] == {"0": "def · self", "1": "table · row", "2": "the · of"}  # JSON's keys
    assert data["rungs"][0]["losses"] == pytest.approx({"0": 4.1, "1": 3.0, "2": 5.1})  # the mean over two seeds
    assert data["rungs"][1]["losses"] == pytest.approx({"0": 3.6, "1": 3.0, "2": 4.0})
    with serve_lab(lab) as server:
        page.goto(f"{server.url}/ladder/ladder-cccc3333")
        page.wait_for_selector("body[data-ready='1']")
        rows = page.locator("table.cluster-scaling tbody tr")
        assert rows.evaluate_all("rs => rs.map(r => r.dataset.cluster)") == ["2", "0", "1"]  # most improved first
        assert rows.nth(0).inner_text().endswith("-21.6%") and rows.nth(2).inner_text().endswith("0.0%")
        assert page.evaluate("() => window.GLASSLAB_CHARTS.clusters.series.length") == 4  # x and 3 clusters
        page.locator("table.cluster-scaling").screenshot(path=tmp_path / "cluster-scaling.png")  # kept to look at
