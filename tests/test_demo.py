"""The main job end to end: `glasslab demo --quick --no-serve` builds the whole lab and its site."""

from __future__ import annotations

import calendar
import json
import random
import sqlite3
import time
from pathlib import Path

import pytest

from cli_runner import run_cli
from glasslab.layout import EXPORT_MANIFEST, MODEL_CARD
from glasslab.posttrain.conversations import read_conversation_split
from glasslab.posttrain.outcome import outcome
from glasslab.posttrain.pairs import read_pair_split

pytestmark = pytest.mark.slow  # the session's demo lab takes about a minute and a half to build


def only(lab: Path, pattern: str) -> Path:
    (match,) = sorted(lab.glob(pattern))
    return match


def test_demo_builds_data_and_report(demo_lab):
    lab = demo_lab.root
    report = json.loads((only(lab, "data-*") / "report.json").read_text())
    assert set(report["domains"]) == {"code", "prose", "reference"}
    assert all(d["tokens"] > 0 and d["eval_tokens"] > 0 for d in report["domains"].values())
    assert report["funnel"][0]["stage"] == "raw" and report["manifest_hash"]


def test_demo_fits_the_ladder_and_preregisters_the_hero(demo_lab):
    lab, stdout = demo_lab.root, demo_lab.stdout
    fit = json.loads((only(lab, "demo-fit-*") / "fit.json").read_text())
    assert len(fit["rungs"]) == 4 and fit["target"] == "eval/macro/loss"
    assert fit["prediction"]["lo"] <= fit["prediction"]["point"] <= fit["prediction"]["hi"]
    assert len(fit["curve"]) == 20
    hero = only(lab, "demo-hero-*")
    record = json.loads((hero / "run.json").read_text())
    assert record["role"] == "hero" and record["prediction"]["point"] == fit["prediction"]["point"]
    assert record["prediction"]["flops"] >= 4 * max(r["flops"] for r in fit["rungs"])
    registered = calendar.timegm(time.strptime(record["prediction"]["registered_at"], "%Y-%m-%dT%H:%M:%SZ"))
    with sqlite3.connect(hero / "metrics.db") as conn:
        first_logged = conn.execute("SELECT MIN(time) FROM scalars").fetchone()[0]
    assert registered <= first_logged
    assert "predicted" in stdout and "relative error" in stdout


def test_demo_hero_has_metrics_samples_and_result(demo_lab):
    lab = demo_lab.root
    hero = only(lab, "demo-hero-*")
    result = json.loads((hero / "result.json").read_text())
    assert 0 < result["eval/macro/loss"] < 10
    with sqlite3.connect(hero / "metrics.db") as conn:
        keys = {k for (k,) in conn.execute("SELECT DISTINCT key FROM scalars")}
        samples = conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    assert {"train/loss", "optim/learning_rate", "eval/macro/loss", "throughput/tokens_per_second"} <= keys
    assert any(k.startswith("moe/layer_") for k in keys)
    assert samples > 0


def test_the_heros_batches_rebuild_to_what_it_trained_on(demo_lab):
    """The hero's first incident (or, in a calm run, random steps) and its last step: each batch rebuilt
    from the run's config and recorded loader starts has the hash the trainer recorded, with the
    documents' sources."""
    from glasslab.data.batches import rebuild_batch
    from glasslab.track import RunReader

    hero = only(demo_lab.root, "demo-hero-*")
    with RunReader(hero) as reader:
        incidents = [e for e in reader.events() if e["kind"] in ("spike_skipped", "rollback") and e["step"]]
        last = reader.batch_hashes()[-1][0]
    picks = [(e["step"], e["attempt"]) for e in incidents[:1]] + [(s, None) for s in random.sample(range(1, last), 2)]
    for step, attempt in picks + [(last, None)]:
        batch = rebuild_batch(hero, step, attempt)
        assert batch.matches, (step, attempt)
        pieces = [p for row in batch.rows for p in row.pieces]
        # A piece of a few tokens that end mid-character decodes to '' (3 of the quick hero's 173 steps hold
        # one); its source is still named.
        assert all(p.source for p in pieces) and sum(bool(p.text) for p in pieces) >= len(pieces) - 1


def test_the_heros_samples_are_traced_to_its_training_data(demo_lab):
    """The demo indexes the hero's training tokens before publishing, so its page traces every sample (the
    published page carries the same spans); a copied span's offsets point into its sample."""
    from glasslab.observatory.lab_scan import Lab
    from glasslab.observatory.page_data import build_page

    hero = only(demo_lab.root, "demo-hero-*")
    assert (only(demo_lab.root, "index-*") / "index.json").is_file()
    page = build_page(Lab(demo_lab.root), "run", hero.name)
    assert page["trace"]["status"] == "traced", page["trace"]
    texts = {str(s["id"]): s["text"] for s in page["samples"]}
    for sample_id, spans in page["trace"]["spans"].items():
        for span in spans:
            assert texts[sample_id][span["char_start"]:span["char_end"]] == span["text"]
    published = next((demo_lab.root / "site" / "data").glob(f"run-{hero.name}*.js")).read_text()
    assert '"status":"traced"' in published


def test_the_demo_maps_its_data_and_its_pages_show_it(demo_lab):
    """The demo maps the hero's training data before publishing: the data page, live and published, has the map."""
    from glasslab.data.map import read_map
    from glasslab.observatory.lab_scan import Lab
    from glasslab.observatory.page_data import build_page

    data = only(demo_lab.root, "data-*")
    summary = read_map(only(demo_lab.root, "map-*"), data)
    assert 4 <= summary["k"] <= 8 and summary["documents"] > 50
    assert sum(c["share"] for c in summary["clusters"]) == pytest.approx(1.0)
    assert all(c["documents"] >= 0.005 * summary["documents"] for c in summary["clusters"])  # min_share 1% of the fit
    page = build_page(Lab(demo_lab.root), "data", data.name)
    assert page["map"]["k"] == summary["k"]
    published = [p.read_text() for p in (demo_lab.root / "site" / "data").glob(f"*{data.name}*.js")]
    name = json.dumps(summary["clusters"][0]["name"])  # as the published page's JSON spells it (\u00b7)
    assert any(name in text for text in published)


def test_demo_publishes_the_static_site(demo_lab):
    lab = demo_lab.root
    assert (lab / "site" / "index.html").is_file()
    assert any((lab / "site").rglob("*.js"))


def test_second_run_reuses_every_step(demo_lab):
    lab = demo_lab.root
    started = time.monotonic()
    result = run_cli("demo", "--quick", "--no-serve", "--lab", str(lab), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert time.monotonic() - started < 60
    assert "predicted" in result.stdout


def step_hashes(lab: Path) -> dict[str, str]:
    from glasslab.lab import read_step_record

    return {p.name: read_step_record(p)["hash"] for p in sorted(lab.iterdir()) if (p / "step.json").is_file()}


def test_every_demo_folder_is_a_succeeded_step_with_lab_events(demo_lab):
    from glasslab.lab import read_step_record
    from glasslab.track import read_lab_events

    folders = step_hashes(demo_lab.root)
    assert len(folders) == 19  # data, 4 rungs, fit, hero, export, conversations, sft, export, pairs, dpo, index, map,
    #                            task conversations, task sft, prompts, rl
    assert all(read_step_record(demo_lab.root / f)["status"] == "succeeded" for f in folders)
    succeeded = {e["subject"] for e in read_lab_events(demo_lab.root) if e["kind"] == "step_succeeded"}
    assert succeeded == set(folders)


def test_the_heros_prediction_is_in_the_lab_registry_and_its_run_json(demo_lab):
    from glasslab.lab import registry
    from glasslab.track import read_lab_events

    lab = demo_lab.root
    entry = registry.predictions(lab)["demo/hero/eval/macro/loss"]
    record = json.loads((only(lab, "demo-hero-*") / "run.json").read_text())
    copy = record["prediction"]
    assert (entry["point"], entry["low"], entry["high"]) == (copy["point"], copy["lo"], copy["hi"])
    assert copy["registry"] == {"name": "demo/hero/eval/macro/loss", "seq": 1}
    assert entry["target"] == "demo-hero" and entry["source"] == only(lab, "demo-fit-*").name
    assert entry["registered_at"] == copy["registered_at"] and entry["metric"] == "eval/macro/loss"
    kinds = [e["kind"] for e in read_lab_events(lab)]
    # The loss, each task's accuracy and the tasks' macro accuracy.
    assert kinds.count("prediction_registered") == 4 and "prediction_replaced" not in kinds


def test_every_run_scores_the_tasks_and_the_ladder_predicts_the_heros_accuracy(demo_lab):
    from glasslab.lab import registry
    from glasslab.observatory.lab_scan import Lab
    from glasslab.observatory.ladder_page import ladder_page

    lab, tasks = demo_lab.root, ("next_word_code", "next_word_prose")
    runs = sorted(lab.glob("demo-d[0-9]*")) + [only(lab, "demo-hero-*")]  # the rungs (not demo-dpo)
    assert len(runs) == 5
    for run in runs:
        record = json.loads((run / "run.json").read_text())
        assert set(record["tasks"]) == set(tasks) and all(record["tasks"][t]["items"] >= 500 for t in tasks)
        with sqlite3.connect(run / "metrics.db") as conn:
            scored = conn.execute("SELECT COUNT(*) FROM scalars WHERE key = 'eval/task/macro/acc'").fetchone()[0]
        assert scored >= 2, run.name  # half-way and at the end
    hero = json.loads((runs[-1] / "result.json").read_text())
    chance = sum(json.loads((runs[-1] / "run.json").read_text())["tasks"][t]["chance"] for t in tasks) / 2
    assert chance == pytest.approx(0.25) and hero["eval/task/macro/acc"] > chance
    fit = json.loads((only(lab, "demo-fit-*") / "fit.json").read_text())
    macro = fit["tasks"]["macro"]
    assert set(fit["tasks"]["by_task"]) == set(tasks) and macro["lo"] <= macro["point"] <= macro["hi"]
    entry = registry.predictions(lab)["demo/hero/task/macro"]
    assert (entry["point"], entry["target"], entry["metric"]) == (macro["point"], "demo-hero", "eval/task/macro/acc")
    assert "hero task accuracy" in demo_lab.stdout
    # The ladder page's registry table: the hero's predicted vs actual macro accuracy.
    page = ladder_page(Lab(lab), only(lab, "demo-fit-*").name)
    (row,) = [r for r in page["registry"] if r["name"] == "demo/hero/task/macro"]
    assert row["verdict"]["state"] == "final"
    assert row["verdict"]["actual"] == pytest.approx(hero["eval/task/macro/acc"])
    # The hero's export: its model card's task table, chance beside each accuracy.
    (hero_export,) = [p for p in lab.glob("export-*")
                      if json.loads((p / EXPORT_MANIFEST).read_text())["run"] == only(lab, "demo-hero-*").name]
    card = (hero_export / MODEL_CARD).read_text()
    assert "Downstream tasks" in card and "| next_word_code | " in card and "| 25.0% |" in card


def test_a_data_build_from_the_command_line_is_the_demos_data_step(tmp_path):
    lab = tmp_path / "lab"
    built = run_cli("data", "build", "demo", "--lab", str(lab), "--quiet", timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (folder,) = lab.glob("data-*")
    assert built.stdout.strip() == str(folder)
    plan = run_cli("run", "demo", "--dry-run", "--lab", str(lab))
    assert plan.returncode == 0, plan.stderr[-3000:]
    (row,) = [line for line in plan.stdout.splitlines() if line.startswith("│ data ")]
    assert "cached" in row and ", 1 cached" in plan.stdout  # the data step, and only it


def test_demo_ends_with_sft_of_the_hero_and_a_chat_export(demo_lab):
    lab = demo_lab.root
    hero, sft = only(lab, "demo-hero-*"), only(lab, "demo-sft-*")
    record = json.loads((sft / "run.json").read_text())
    assert record["role"] == "sft" and record["parent"]["run"] == hero.name
    before = record["base"]["metrics"]["eval/sft/loss"]
    after = json.loads((sft / "result.json").read_text())["eval/sft/loss"]
    assert after < before  # held-out assistant tokens: the fine-tuned hero beats its base
    # The tasks, plain and posed as chat turns, scored on the base and after SFT (the demo's table shows both).
    tasks = outcome(sft)["tasks"]
    assert set(tasks) == {"next_word_code", "next_word_prose", "next_word_code_chat", "next_word_prose_chat",
                          "macro"}
    assert all(0 <= acc <= 1 for pair in tasks.values() for acc in pair)
    assert "next_word_code_chat accuracy" in demo_lab.stdout
    assert "held-out SFT loss" in demo_lab.stdout and "chat export-" in demo_lab.stdout
    exports = {json.loads((p / EXPORT_MANIFEST).read_text())["run"]: p for p in lab.glob("export-*")}
    assert set(exports) == {hero.name, sft.name}
    assert "chat_template" in json.loads((exports[sft.name] / "tokenizer_config.json").read_text())
    counts = record["conversations"]["train"]  # every conversation accounted for: whole, cut, or left out
    assert counts["whole"] + counts["cut"] + counts["left_out"] == counts["conversations"] > counts["left_out"]
    reply = run_cli("chat", exports[sft.name].name, "--lab", str(lab), "--prompt", "What does `len` do?",
                    "--temperature", "0", "--max-new-tokens", "16", timeout=300)
    assert reply.returncode == 0, reply.stderr[-2000:]


def test_demo_preference_tunes_its_sft_model_on_the_builtin_pairs(demo_lab):
    lab = demo_lab.root
    sft, dpo = only(lab, "demo-sft-*"), only(lab, "demo-dpo-*")
    record = json.loads((dpo / "run.json").read_text())
    assert record["role"] == "dpo" and record["parent"]["run"] == sft.name and record["beta"] == 0.1
    assert record["pairs"]["heldout"]["kept"] > 0 and record["pairs"]["train"]["kept"] > 100
    before = record["base"]["metrics"]
    assert before["eval/dpo/reward_margin"] == 0  # the SFT model is its own reference before step 1
    result = json.loads((dpo / "result.json").read_text())
    # On the held-out pairs (the last training batch's accuracy is 16 pairs' worth of noise)
    assert result["eval/dpo/reward_margin"] > 0 and result["eval/dpo/accuracy"] > 0.5
    assert "held-out preference accuracy (SFT -> DPO)" in demo_lab.stdout
    assert {p["kind"] for p in read_pair_split(only(lab, "demo-pairs-*"), "heldout")} == {"arithmetic"}
    task_sft = only(lab, "demo-task-sft-*")  # the arithmetic task's SFT of the DPO model, then GRPO of it, last
    assert json.loads((task_sft / "run.json").read_text())["parent"]["run"] == dpo.name
    assert {r["kind"] for r in read_conversation_split(only(lab, "demo-task-conversations-*"), "train")} == {
        "task:arithmetic"}
    rl = json.loads((only(lab, "demo-rl-*") / "run.json").read_text())
    assert rl["role"] == "rl" and rl["parent"]["run"] == task_sft.name and rl["reward"] == "builtin:arithmetic"
    assert "held-out answer loss (DPO -> task SFT)" in demo_lab.stdout
    assert "held-out pass@1 (task SFT -> RL)" in demo_lab.stdout
