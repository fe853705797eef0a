"""The pages' data without a browser: verdicts, rounding to the uncertainty, panels and per-layer
families, chance levels, what changed in a run (z-scores, experts at the extremes) and the links
between runs, datasets, ladders and exports, read from the synthetic lab's files."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from glasslab.observatory.changes import experts_now, what_changed
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.ladder_page import floor_line, registry_entries, with_uncertainty
from glasslab.observatory.page_data import build_page
from glasslab.observatory.panels import chart_specs, group_panels, layer_of
from glasslab.observatory.relations import Relations
from glasslab.observatory.run_page import chance_levels, run_series
from glasslab.observatory.verdict import verdict
from glasslab.track.reader import RunReader
from glasslab.track.store import RunStore
from observatory_lab import build_lab

CURVE = [{"fraction": f / 4, "point": 4.0 - f * 0.2, "lo": 3.8 - f * 0.2, "hi": 4.2 - f * 0.2} for f in range(1, 5)]
PREDICTION = {"point": 3.2, "lo": 3.0, "hi": 3.4, "curve": CURVE}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return Lab(build_lab(tmp_path_factory.mktemp("data") / "lab"))


@pytest.mark.parametrize(("value", "se", "text"), [
    (15.284887259034736, 2.2139669611054353, "15.3 ± 2.2"),
    (0.05034004050916622, 0.0059479950217904256, "0.0503 ± 0.0059"),
    (12345.6, 2345.6, "12300 ± 2300"),
    (1.0, 0.0, "1"),
    (3.14159, None, "3.142"),
])
def test_parameters_are_rounded_to_their_uncertainty(value, se, text):
    assert with_uncertainty(value, se) == text


def test_the_floor_line_says_where_the_floor_came_from():
    estimated = {"mode": "grid", "value": 1.23, "lo": 1.1, "hi": 1.35,
                 "text": "estimated from the rungs: E = 1.230 [1.100, 1.350] (90%)"}
    assert floor_line({"L_inf": estimated}) == estimated["text"]
    # Fits written before the words: from the mode and the value.
    assert floor_line({"L_inf": {"mode": "pinned", "value": 1.1}}) == "pinned by the user: L∞ = 1.1"
    assert floor_line({"L_inf": {"mode": "free", "value": 0.42}}) == "fitted freely to the rungs by L(C): L∞ = 0.420"
    assert floor_line({}) == ""


def test_verdict_final_so_far_stopped_and_pending():
    final = verdict(PREDICTION, 100, 3.611, 100, "finished")
    assert final["state"] == "final" and final["inside"] is False
    assert final["text"] == "3.611 vs predicted 3.200 [3.000, 3.400]: -11.4%, above the band"
    inside = verdict({**PREDICTION, "point": 3.678, "lo": 3.542, "hi": 3.829}, 100, 3.611, 100, "finished")
    assert inside["text"] == "3.611 vs predicted 3.678 [3.542, 3.829]: +1.9%, inside"  # the issue's example
    # Halfway through a running hero: the band at 50% of training, linear between curve points.
    so_far = verdict(PREDICTION, 50, 3.7, 100, "running")
    assert so_far["state"] == "so_far" and so_far["point"] == pytest.approx(3.6) and so_far["inside"] is True
    assert verdict(PREDICTION, 60, 3.7, 100, "running")["point"] == pytest.approx(3.52)
    assert so_far["text"].endswith("so far (50% of training)")
    assert verdict(PREDICTION, 60, 3.85, 100, "finished")["state"] == "stopped"
    assert verdict(PREDICTION, 10, 4.5, 100, "running")["inside"] is None  # before the curve's first point
    assert verdict(PREDICTION, None, None, 100, "running")["state"] == "pending"
    assert verdict({"point": "x"}, 1, 1.0, 1, None) is None


def test_panels_have_titles_that_say_what_they_show():
    panels = {p["title"]: p["keys"] for p in group_panels(
        ["memory/peak_bytes", "train/tokens", "train/loss", "sft/loss", "eval/task/copy/acc", "eval/task/macro/acc",
         "eval/task/copy/bpb", "bench/a", "bench/b", "custom/only"])}
    assert panels["Peak memory"] == ["memory/peak_bytes"] and panels["Tokens seen"] == ["train/tokens"]
    assert panels["Task accuracy"] == ["eval/task/copy/acc", "eval/task/macro/acc"]
    assert panels["SFT loss (assistant tokens only)"] == ["sft/loss"]
    assert panels["bench/…"] == ["bench/a", "bench/b"] and panels["custom/only"] == ["custom/only"]
    assert "memory" not in panels and "train" not in panels
    keys = ["eval/task/copy/acc", "eval/task/copy/acc_norm", "eval/task/macro/acc", "eval/task/other/acc"]
    assert chance_levels({"tasks": [{"name": "copy", "chance": 0.25}, {"name": "other", "chance": 0.5}]}, keys) == {
        "eval/task/copy/acc": 0.25, "eval/task/copy/acc_norm": 0.25, "eval/task/other/acc": 0.5,
        "eval/task/macro/acc": 0.375}
    assert chance_levels({}, keys) == {}


def test_per_layer_families_become_charts_of_their_own():
    assert layer_of("moe/layer_12/routing_entropy") == ("moe/layer_*/routing_entropy", 12)
    assert layer_of("grad/norm/layer_3/attn") == ("grad/norm/layer_*/attn", 3)
    assert layer_of("grad/norm/attn") is None and layer_of("player_1/x") is None
    keys = ["grad/norm/total", "grad/norm/attn", *(f"grad/norm/layer_{i}/attn" for i in (10, 2, 1)),
            "moe/layer_0/load_max_violation", "moe/layer_1/load_max_violation", "moe/layer_0/routing_entropy"]
    charts = {c["id"]: c for c in chart_specs(keys)}
    # The panel keeps what is not per layer; the family is a chart of its own, its rows by layer number.
    assert charts["Gradient norm"]["keys"] == ["grad/norm/total", "grad/norm/attn"]
    family = charts["Gradient norm: grad/norm/layer_*/attn"]
    assert family["family"] == {"pattern": "grad/norm/layer_*/attn", "rows": [1, 2, 10], "row": "layer"}
    assert family["keys"] == ["grad/norm/layer_1/attn", "grad/norm/layer_2/attn", "grad/norm/layer_10/attn"]
    assert family["logy"] is True
    # A panel that is one family keeps its title; a single layer is no family.
    assert charts["MoE load: max violation per layer"]["family"]["rows"] == [0, 1]
    assert charts["MoE routing entropy per layer"]["family"] is None
    # Content clusters of the data map are a family too, even one alone (the run page's cluster × step heatmap).
    assert layer_of("eval/cluster/7/loss") == ("eval/cluster/*/loss", 7)
    assert layer_of("eval/cluster/other/loss") == ("eval/cluster/*/loss", "other")  # the small clusters merged
    assert layer_of("moe/layer_other/x") is None
    keys = ["eval/cluster/other/loss", "eval/cluster/12/loss", "eval/cluster/3/loss", "eval/code/loss"]
    clusters = {c["id"]: c for c in chart_specs(keys)}
    assert clusters["Held-out loss per content cluster (the data map)"]["family"] == {
        "pattern": "eval/cluster/*/loss", "rows": [3, 12, "other"], "row": "cluster"}  # the merged row last
    assert clusters["Eval loss per domain"]["keys"] == ["eval/code/loss"]


def test_what_changed_scores_the_latest_value_against_the_fifty_before(tmp_path):
    rng = np.random.default_rng(0)
    history = rng.normal(1.0, 0.1, 80)
    store = RunStore(tmp_path / "run")
    for step, value in enumerate(history):
        store.log({"steady": float(value), "jumps": float(value) + (5.0 if step == 79 else 0.0),
                   "flat": 2.0 if step < 79 else 2.5, "short": 1.0}, step)
        if step == 79:
            store.log({"broke": math.nan}, step)
        elif step >= 70:
            store.log({"broke": 1.0 + 0.01 * step}, step)
    store.close()
    # A resume that logs the last step again: the latest attempt's value counts, once.
    store = RunStore(tmp_path / "run", reason="resume")
    store.log({"steady": float(history[79]) + 0.05}, 79)
    store.close()
    with RunReader(tmp_path / "run") as reader:
        assert [s for s, _ in reader.recent("steady", 51)] == list(range(29, 80))
        changed = what_changed(reader, ["steady", "jumps", "flat", "short", "broke"])
    moves = {m["key"]: m for m in changed["metrics"]}
    assert [m["key"] for m in changed["metrics"][:3]] == ["broke", "flat", "jumps"]  # news first, then by |z|
    assert moves["broke"]["kind"] == "nonfinite" and moves["flat"]["kind"] == "left_constant"
    before = history[29:79]
    expected = (history[79] + 5.0 - before.mean()) / before.std(ddof=1)
    assert moves["jumps"]["z"] == pytest.approx(expected, rel=1e-9) and moves["jumps"]["n"] == 50
    steady = (history[79] + 0.05 - before.mean()) / before.std(ddof=1)
    assert moves["steady"]["z"] == pytest.approx(steady, rel=1e-9) and abs(moves["steady"]["z"]) < 3
    assert moves["short"]["z"] == 0.0 and changed["scored"] == 5


def test_experts_now_name_the_extremes_of_load_and_bias(tmp_path):
    store = RunStore(tmp_path / "run")
    for step in (0, 100):
        for layer in range(3):
            load = [0.25] * 4
            if step == 100 and layer == 2:
                load = [0.55, 0.15, 0.15, 0.15]  # layer 2, expert 0: 2.2x its fair share, now
            store.log_vector(f"moe/layer_{layer}/expert_load", load, step)
            store.log_vector(f"moe/layer_{layer}/router_bias", [0.01 * layer * (e - 1.5) for e in range(4)], step)
    store.close()
    with RunReader(tmp_path / "run") as reader:
        now = experts_now(reader, reader.vector_keys())
    most = now["load"]["most"][0]
    assert (most["layer"], most["expert"], most["step"]) == (2, 0, 100) and most["ratio"] == pytest.approx(2.2)
    assert now["load"]["layers"][0] == {"layer": 2, "step": 100, "imbalance": pytest.approx(2.2)}
    assert now["load"]["least"][0]["ratio"] == pytest.approx(0.6)
    assert (now["bias"]["highest"][0]["layer"], now["bias"]["highest"][0]["expert"]) == (2, 3)
    assert now["bias"]["lowest"][0]["value"] == pytest.approx(-0.03)
    with RunReader(tmp_path / "run") as reader:
        assert experts_now(reader, []) == {"load": {"most": [], "least": [], "layers": []},
                                           "bias": {"highest": [], "lowest": []}}


def test_relations_between_runs_datasets_ladders_and_exports(lab):
    relations = Relations(lab)
    assert relations.parent("fork-eeee5555") == {"run": "rung-m-bbbb2222", "name": "rung-m-bbbb2222", "step": 20}
    assert relations.children("rung-m-bbbb2222") == [{"run": "fork-eeee5555", "step": 20}]
    assert relations.children("hero-dddd4444") == [] and relations.parent("hero-dddd4444") is None
    exports = relations.exports("hero-dddd4444")
    assert [(e["id"], e["step"], e["manifest"]["max_logit_diff"]) for e in exports] == [("export-ffff6666", 19, 3e-6)]
    assert relations.dataset("hero-dddd4444") == "data-abc12345"  # named in run.json
    assert relations.dataset("fork-eeee5555") == "data-abc12345"  # found by its data manifest hash
    assert relations.ladder("rung-s-aaaa1111") == "ladder-cccc3333" and relations.ladder("fork-eeee5555") is None
    reproduce = relations.reproduce("fork-eeee5555")
    assert reproduce["commands"][-1] == ("glasslab train run-config.json data.path=lab/data-abc12345 "
                                         "--fork rung-m-bbbb2222@20 --lab lab")


def test_registry_lists_every_entry_with_the_verdict_of_the_one_in_force(lab):
    entries = registry_entries(lab)
    assert [(e["seq"], e["in_force"], e["run"]) for e in entries] == [(1, False, "hero-dddd4444"),
                                                                       (2, True, "hero-dddd4444")]
    assert entries[0]["verdict"] is None and entries[1]["verdict"]["state"] == "final"
    assert entries[1]["verdict"]["inside"] is False


def test_overview_counts_incidents_and_data_page_warns(lab):
    overview = build_page(lab, "overview")
    assert overview["title"] == "Overview" and overview["lab_name"] == "lab"
    runs = {r["id"]: r for r in overview["runs"]}
    assert runs["rung-s-aaaa1111"]["incidents"] == {"spike_skipped": 1, "step_retried": 1}
    assert runs["hero-dddd4444"]["verdict"]["state"] == "final"
    data = build_page(lab, "data", "data-abc12345")
    kinds = sorted({(w["kind"], w["domain"]) for w in data["warnings"]})
    assert kinds == [("eval_ge_train", "code"), ("large_removal", "code"), ("repetition", "code"),
                     ("repetition", "web")]
    assert {r["id"] for r in data["runs"]} == {"hero-dddd4444", "rung-s-aaaa1111", "rung-m-bbbb2222",
                                               "fork-eeee5555"}
    hero = next(r for r in data["runs"] if r["id"] == "hero-dddd4444")
    assert hero["domains"]["web"]["weight"] == 0.7 and hero["domains"]["web"]["epochs"] == pytest.approx(6.0)


def test_pages_read_again_only_the_stores_that_changed(tmp_path, monkeypatch):
    """The overview, the compare picker and the run page keep what they read from a store while its files
    are unchanged (a lab of a thousand runs), and read a store again once it changed."""
    from glasslab import track
    from glasslab.observatory import runs as runs_module
    from observatory_lab import log_step

    root = build_lab(tmp_path / "lab")
    for db in root.glob("*/metrics.db*"):  # written over a second ago: past the racy window
        os.utime(db, ns=(db.stat().st_atime_ns, db.stat().st_mtime_ns - 5_000_000_000))
    lab = Lab(root)
    opened = []
    real_reader = runs_module.RunReader
    monkeypatch.setattr(runs_module, "RunReader", lambda folder: opened.append(folder.name) or real_reader(folder))
    first = build_page(lab, "overview")
    build_page(lab, "compare", with_series=False)
    build_page(lab, "run", "rung-s-aaaa1111")
    assert len(opened) >= 4
    opened.clear()
    assert build_page(lab, "overview") == first
    build_page(lab, "compare", with_series=False)
    build_page(lab, "run", "rung-s-aaaa1111")
    assert opened == ["hero-dddd4444"]  # the ladder's verdict on the overview reads its hero each time
    opened.clear()
    run = track.init(root / "rung-s-aaaa1111", {}, reason="resume")
    log_step(run, 30)
    run.finish()
    steps = {r["id"]: r["step"] for r in build_page(lab, "overview")["runs"]}
    assert steps["rung-s-aaaa1111"] == 30 and set(opened) == {"rung-s-aaaa1111", "hero-dddd4444"}
    assert run_series(lab, "rung-s-aaaa1111", ["train/loss"])["train/loss"]["steps"][-1] == 30
