"""Experiment cards: the decision rule on inside/outside/missing results, immutable card versions, the
CLI (``glasslab card``, ``note --experiment``), and the narrating terminal telling an injected
rollback while the step still runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cli_runner import run_cli
from glasslab.errors import UserError
from glasslab.lab import Executor, load_experiment, registry
from glasslab.lab.card import (
    Expectation,
    ExperimentCard,
    add_conclusion,
    card_versions,
    decide,
    experiment_runs,
    record_run,
)
from glasslab.lab.card_results import card_results
from glasslab.lab.status import write_step_record
from glasslab.layout import RESULT_FILE, card_version_path, write_json_atomic
from glasslab.observatory.card_render import card_markdown
from glasslab.observatory.publish import figure_file

CARD = ExperimentCard(
    title="Toy", question="Does the toy train land in its band?", design="one training step",
    expectations=(Expectation("final loss", prediction="toy/loss"),
                  Expectation("throughput", step="train", metric="throughput/tokens_per_second", low=100.0,
                              unit="tokens/s")),
)


def test_decision_rule():
    assert decide([True, True]) == "confirmed"
    assert decide([True, False, None]) == "refuted"
    assert decide([True, None]) == "open"
    assert decide([]) == "open"


def _toy_lab(root: Path, status: str, loss: float | None, tokens_per_s: float = 500.0) -> Path:
    folder = root / "train-aaaa1111"
    folder.mkdir(parents=True)
    write_step_record(folder, {"name": "train", "status": status, "attempts": 1,
                               "timings": {"started": 100.0, "finished": 160.0, "duration_s": 60.0}})
    if loss is not None:
        write_json_atomic(folder / RESULT_FILE, {"eval/macro/loss": loss, "throughput/tokens_per_second": tokens_per_s,
                                                 "flops": 1e12, "tokens": 4096})
    registry.register(root, "toy/loss", metric="eval/macro/loss", point=2.0, low=1.9, high=2.1, target="train",
                      source="fit-bbbb2222")
    record_run(root, "toy", CARD, {"train": folder.name})
    return root


@pytest.mark.parametrize(("status", "loss", "tokens_per_s", "verdict", "inside"), [
    ("succeeded", 2.05, 500.0, "confirmed", [True, True]),
    ("succeeded", 2.5, 500.0, "refuted", [False, True]),
    ("succeeded", 2.05, 50.0, "refuted", [True, False]),
    ("running", None, 500.0, "open", [None, None]),
])
def test_results_inside_outside_missing(tmp_path, status, loss, tokens_per_s, verdict, inside):
    results = card_results(_toy_lab(tmp_path / "lab", status, loss, tokens_per_s), "toy")
    assert results["verdict"] == verdict
    assert [e["inside"] for e in results["expectations"]] == inside
    hero = results["expectations"][0]
    assert (hero["low"], hero["point"], hero["high"]) == (1.9, 2.0, 2.1)
    assert hero["band_text"] == "[1.9000, 2.1000]"
    assert results["verdict_text"].startswith(verdict)
    if loss is not None:
        assert hero["actual"] == pytest.approx(loss)
        assert results["totals"]["flops"] == pytest.approx(1e12)
        assert results["totals"]["wall_seconds"] == pytest.approx(60.0)
    markdown = card_markdown(results)
    assert f"**Verdict: {verdict}**" in markdown and "Does the toy train land in its band?" in markdown
    assert "## Incidents\n\nnone" in markdown


@pytest.mark.parametrize(("floor", "text"), [
    ({"mode": "grid", "value": 1.23, "lo": 1.1, "hi": 1.35, "text": "estimated from the rungs: E = 1.230 [1.100, "
      "1.350] (90%)"}, "estimated from the rungs: E = 1.230 [1.100, 1.350] (90%)"),
    ({"mode": "pinned", "value": 1.1}, "pinned at L∞ = 1.1"),  # registered before the words were
])
def test_a_ladder_predictions_floor_is_on_the_card(tmp_path, floor, text):
    root = _toy_lab(tmp_path / "lab", "succeeded", 2.05)
    registry.register(root, "toy/loss", metric="eval/macro/loss", point=2.01, low=1.9, high=2.1, target="train",
                      source="fit-bbbb2222", details={"L_inf": floor}, replace=True)
    hero = card_results(root, "toy")["expectations"][0]
    assert hero["floor"] == text and hero["source"] == f"registry: toy/loss; floor {text}"
    assert f"floor {text}" in card_markdown(card_results(root, "toy"))
    assert card_results(root, "toy")["expectations"][1]["floor"] == ""


def test_a_refused_prediction_whose_hero_ran_forced_says_so_on_the_card(tmp_path):
    root = _toy_lab(tmp_path / "lab", "succeeded", 2.05)
    gate = {"registered": False, "reasons": ["span of N: largest N / smallest N = 4"], "flags": [], "checks": []}
    for forced in (False, True):
        registry.register(root, "toy/loss", metric="eval/macro/loss", point=2.01, low=1.9, high=2.1, target="train",
                          source="fit-bbbb2222", replace=True, kind="refusal", gate=gate, forced=forced)
    status = "REFUSED by the registration gate (span of N: largest N / smallest N = 4); hero FORCED"
    assert card_results(root, "toy")["expectations"][0]["source"] == f"registry: toy/loss; {status}"
    assert status in card_markdown(card_results(root, "toy"))


def test_expectation_needs_a_band_or_a_prediction():
    with pytest.raises(UserError, match="expected a band"):
        Expectation("x", step="train", metric="loss")
    with pytest.raises(UserError, match="takes its band"):
        Expectation("x", prediction="p", low=1.0)
    with pytest.raises(UserError, match="step= and metric="):
        Expectation("x", low=1.0)


EXPERIMENT = '''
"""A toy experiment for the card tests."""
from glasslab.lab import Step
from glasslab.lab.card import Expectation, ExperimentCard

CARD = ExperimentCard(title="Toy", question="{question}",
                      expectations=(Expectation("answer", step="answer", metric="value", low=41, high=43),))


def answer(ctx):
    return {{"value": 42}}


def steps():
    return [Step("answer", answer, config={{}})]
'''


def test_changed_card_is_a_new_version_and_the_old_one_stays(tmp_path):
    lab, path = tmp_path / "lab", tmp_path / "toy.py"
    path.write_text(EXPERIMENT.format(question="Is it 42?"))
    assert run_cli("run", str(path), "--lab", str(lab)).returncode == 0
    first = card_version_path(lab, "toy", 1).read_bytes()
    path.write_text(EXPERIMENT.format(question="Is it still 42?"))
    result = run_cli("run", str(path), "--lab", str(lab))
    assert result.returncode == 0, result.stderr
    assert "experiment toy: confirmed: 1 of 1 expectations inside their bands" in result.stdout
    assert card_version_path(lab, "toy", 1).read_bytes() == first
    versions = card_versions(lab, "toy")
    assert [v["card"]["question"] for v in versions] == ["Is it 42?", "Is it still 42?"]
    assert versions[0]["hash"] != versions[1]["hash"] and versions[1]["code"]["commit"]
    assert run_cli("run", str(path), "--lab", str(lab)).returncode == 0  # the same card: no third version
    assert len(card_versions(lab, "toy")) == 2
    assert [r["card_version"] for r in experiment_runs(lab, "toy")] == [1, 2, 2]
    results = card_results(lab, "toy")
    assert (results["version"], results["verdict"], results["expectations"][0]["actual"]) == (2, "confirmed", 42)

    noted = run_cli("note", "--experiment", "toy", "42 it is, twice", "--lab", str(lab))
    assert noted.returncode == 0, noted.stderr
    shown = run_cli("card", "toy", "--lab", str(lab), "--markdown", "--site-url", "https://lab.example/site/")
    assert shown.returncode == 0, shown.stderr
    assert "42 it is, twice" in shown.stdout and "Is it still 42?" in shown.stdout
    assert re.search(r"Card page: https://lab\.example/site/experiment-toy-[0-9a-f]{8}\.html", shown.stdout)
    missing = run_cli("card", "nope", "--lab", str(lab))
    assert missing.returncode == 2 and "experiment 'nope': it has not run in lab" in missing.stderr
    assert "Traceback" not in missing.stderr
    with pytest.raises(UserError, match="has not run"):
        add_conclusion(lab, "nope", "text")


ROLLBACK_EXPERIMENT = '''
"""A step that logs a few steps, records a rollback, and keeps running a while."""
import time

from glasslab import track
from glasslab.lab import Step


def train(ctx):
    run = track.init(ctx.output_dir, {{}}, record_extra={{"total_steps": 10}})
    for step in range(1, 6):
        run.log({{"train/loss": 5.0 - 0.1 * step, "throughput/tokens_per_second": 1234.0}}, step=step)
    run.flush()
    run.annotate("rollback", "loss spiked; back to the checkpoint at step 3", step=5, severity="incident")
    time.sleep({sleep})
    run.finish()


def steps():
    return [Step("train", train, config={{}})]
'''


def test_narrator_prints_an_injected_rollback_as_it_happens(tmp_path, capsys):
    path = tmp_path / "rolls.py"
    path.write_text(ROLLBACK_EXPERIMENT.format(sleep=3))
    executor = Executor(tmp_path / "lab", heartbeat_s=0.2, narrate=True)
    executor.narrate_interval_s = 0.5
    report = executor.run(load_experiment(path))
    assert report.ok
    err = capsys.readouterr().err
    lines = err.splitlines()
    rollback = [i for i, line in enumerate(lines) if "rollback at step 5: loss spiked; back to the checkpoint" in line]
    succeeded = [i for i, line in enumerate(lines) if "succeeded in" in line]
    assert len(rollback) == 1 and succeeded and rollback[0] < succeeded[0], err
    status = [line for line in lines if "step 5/10 · loss 4.5000 · 1,234 tokens/s" in line]
    assert status, err  # the plain (not a terminal) status line, one per interval
    assert all(len(line) > 0 and "\n" not in line for line in lines)


def test_demo_card_markdown_and_page_show_the_same_numbers(demo_lab):
    result = run_cli("card", "demo", "--markdown", "--lab", str(demo_lab.root))
    assert result.returncode == 0, result.stderr
    md = result.stdout
    card = card_results(demo_lab.root, "demo")
    hero = card["expectations"][0]
    entry = registry.predictions(demo_lab.root)["demo/hero/eval/macro/loss"]
    assert (hero["low"], hero["point"], hero["high"]) == (entry["low"], entry["point"], entry["high"])
    assert hero["actual"] is not None
    hero_dir = demo_lab.root / hero["folder"]
    assert hero["actual"] == pytest.approx(json.loads((hero_dir / RESULT_FILE).read_text())["eval/macro/loss"])
    assert card["question"] in md and f"**Verdict: {card['verdict']}**" in md
    plain = re.sub(r"\[\^\d+\]", "", md)  # without the footnote marks that name each number's source
    assert f"| {hero['point_text']} | {hero['band_text']} | {hero['actual_display']} | {hero['inside_text']} |" in plain
    assert ("## Incidents\n\nnone" in md) == (not card["incidents"])
    for incident in card["incidents"]:
        assert incident["title"].replace("|", "\\|") in md
    assert f"experiment demo: {card['verdict_text']}" in demo_lab.stdout.replace("\n", " ")
    # The fit's figure travels with the published site, and the Markdown shows it from there.
    (fit,) = [s for s in card["steps"] if s["name"] == "demo-fit"]
    assert fit["figures"] == ["ladder.png"]
    figure = figure_file(fit["folder"], "ladder.png")
    assert (demo_lab.root / "site" / figure).read_bytes() == (demo_lab.root / fit["folder"] / "ladder.png").read_bytes()
    linked = run_cli("card", "demo", "--markdown", "--site-url", "https://lab.example/", "--lab", str(demo_lab.root))
    assert f"](https://lab.example/{figure})" in linked.stdout


def test_narrator_says_a_resumed_runs_history_once_and_never_wraps(tmp_path):
    import io
    import time

    from rich.console import Console

    from glasslab import track
    from glasslab.lab.display import ProgressPrinter
    from glasslab.lab.narrate import Narrator

    run_dir = tmp_path / "hero-aaaa1111"
    run = track.init(run_dir, {}, record_extra={"total_steps": 100})
    run.log({"train/loss": 3.0}, step=1)
    run.flush()
    run.annotate("rollback", "an earlier attempt's rollback", step=1, severity="incident")
    resumed_at = time.time() + 0.01
    time.sleep(0.02)
    out = io.StringIO()
    narrator = Narrator(ProgressPrinter(Console(file=out, width=80)), interval_s=0.0, live=False)
    narrator.update({run_dir.name: (run_dir, resumed_at)})
    long_title = "spike " + "x" * 200
    run.annotate("spike_skipped", long_title, step=2, severity="warning")
    run.log({"train/loss": 2.5}, step=2)
    run.flush()
    narrator.update({run_dir.name: (run_dir, resumed_at)})
    narrator.close()
    run.finish()
    lines = out.getvalue().splitlines()
    assert not any("an earlier attempt's rollback" in line for line in lines)
    assert sum("continues a run with 1 earlier incident(s)" in line for line in lines) == 1
    (spike,) = [line for line in lines if "spike skipped at step 2" in line]
    assert spike.endswith("x" * 200)  # one line, however long: logs keep one event per line
    assert any("step 2/100 · loss 2.5000" in line for line in lines)
