"""`glasslab reproduce`: a short run replayed from its published site alone comes out bit-identical."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading

import pytest

from glasslab.cli import main as cli_main
from glasslab.data.build import build_step
from glasslab.errors import UserError
from glasslab.lab import Step, run_one_step
from glasslab.layout import read_json
from glasslab.observatory.publish import publish
from glasslab.reproduce.published import read_published
from glasslab.reproduce.replay import PublishedRun, check_replayable, compare, find_or_build_dataset, report_lines
from train_data import tiny_build_config, tiny_run_config


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A 12-step run with the published checkpoint schedule, its lab's site copied elsewhere, the lab gone."""
    root = tmp_path_factory.mktemp("reproduce")
    lab = root / "lab"
    dataset = run_one_step(Step("data", build_step, tiny_build_config()), lab).folder
    config = tiny_run_config(dataset, moe=True, max_steps=12, checkpoint_interval=8, keep_log=True, keep_last=1,
                             schedule={"kind": "wsd", "warmup_fraction": 0.0, "decay_fraction": 0.25})
    (root / "run.json").write_text(json.dumps(config))
    assert cli_main(["train", str(root / "run.json"), "--lab", str(lab)]) == 0
    publish(lab, root / "site")
    shutil.copytree(root / "site", root / "elsewhere")
    shutil.rmtree(lab)
    (page,) = (root / "elsewhere").glob("run-run-*.html")
    return root, page


def test_a_run_replayed_from_its_site_alone_is_bit_identical_at_every_published_checkpoint(published, capsys):
    root, page = published
    code = cli_main(["reproduce", str(page), "--lab", str(root / "replay")])
    out = capsys.readouterr().out
    assert code == 0, out
    # 0, 1, 2, 4 (log-spaced below the interval of 8), 9 (before the decay), 12 (the end); keep_last=1 kept no 8.
    assert [line.split(":")[0] for line in out.splitlines()[:6]] == [f"step {s}" for s in (0, 1, 2, 4, 9, 12)]
    assert out.count(": bit-identical") == 6 and "6 of 6 published checkpoints bit-identical" in out
    assert "tolerance" not in out  # the same platform, commit, packages and threads as the original
    assert list((root / "replay").glob("data-*/manifest.json"))  # the data was built again from the site


def test_until_over_http_trains_only_so_far_and_compares_what_it_reached(published, capsys):
    root, page = published
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(page.parent))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{page.name}"
        code = cli_main(["reproduce", url, "--until", "3", "--lab", str(root / "partial")])
    finally:
        server.shutdown()
    out = capsys.readouterr().out
    assert code == 0, out
    assert "3 of 3 published checkpoints bit-identical" in out  # steps 0, 1, 2
    (replay,) = (root / "partial").glob("reproduce-*")
    steps = [c["step"] for c in json.loads((replay / "checkpoints.json").read_text())["checkpoints"]]
    assert max(steps) == 3  # stopped there, as a preemption stops: the same command without --until resumes


def test_a_replay_that_went_apart_names_the_first_step_whose_inputs_and_loss_differ(published, capsys):
    """The site's step record holds every step's loss and batch hash (the charts' series are thinned), so
    a differing replay is placed exactly: here the published record is altered at steps 5 and 7."""
    root, page = published
    assert cli_main(["reproduce", str(page), "--lab", str(root / "replay")]) == 0  # reused if already replayed
    capsys.readouterr()
    run = read_published(str(page))
    assert sorted(run.losses) == sorted(run.batches) == list(range(1, 13))
    run.batches[5] = "0" * 16
    run.losses[7] += 1e-3
    run.checkpoints[-1]["weights_sha256"] = "0" * 64
    (replay,) = (root / "replay").glob("reproduce-*")
    *same, last = compare(run, replay)
    assert all(v.identical for v in same)
    assert (last.step, last.identical, last.first_input_difference, last.first_loss_difference) == (12, False, 5, 7)
    assert last.largest_loss_difference == pytest.approx(1e-3, rel=1e-6)
    assert "input tokens first differ at step 5" in report_lines(run, [last])[0]


def _record(**fields) -> PublishedRun:
    return PublishedRun("run-x", {"code": {"commit": "a" * 40, "dirty": False}, **fields}, [], {}, {}, None)


@pytest.mark.parametrize(("fields", "expected"), [
    ({"role": "sft", "parent": {"run": "base-run"}}, "reproduce its parent base-run first"),
    ({"parent": {"run": "trunk", "step": 40}}, "a forked run; reproduce its parent trunk first"),
    ({"code": {"commit": "b" * 40, "dirty": True, "diff_sha256": "c" * 64}}, "uncommitted changes"),
    ({}, f"git checkout {'a' * 40}"),
])
def test_what_cannot_be_replayed_is_refused_in_one_line(fields, expected):
    with pytest.raises(UserError, match=expected):
        check_replayable(_record(**fields), allow_other_commit=False)


def test_a_checkout_with_other_uncommitted_changes_is_refused_or_marks_every_line(monkeypatch):
    """A replay from a dirty checkout is refused unless the run was trained with that very diff; with
    --allow-dirty it goes on and no line of its report reads as a clean replay's."""
    from glasslab.reproduce import replay as reproduce
    from glasslab.reproduce.replay import CheckpointVerdict

    here = {"commit": "a" * 40, "dirty": True, "diff_sha256": "d" * 64}
    monkeypatch.setattr(reproduce, "code_version", lambda: here)
    clean = _record()
    refused = r"run-x: this checkout has uncommitted changes \(diff sha256 d{16}\).*--allow-dirty"
    with pytest.raises(UserError, match=refused):
        check_replayable(clean, allow_other_commit=False)
    check_replayable(clean, allow_other_commit=False, allow_dirty=True)
    lines = report_lines(clean, [CheckpointVerdict(0, True), CheckpointVerdict(4, True)])
    assert len(lines) == 3 and all(line.startswith(f"[uncommitted changes {'d' * 12}] ") for line in lines), lines
    trained_so = _record(code=dict(here))  # the run was trained with this very diff: a clean replay
    check_replayable(trained_so, allow_other_commit=False)
    assert report_lines(trained_so, [CheckpointVerdict(0, True)])[0] == "step 0: bit-identical"


def test_a_rebuilt_dataset_that_differs_is_refused_naming_the_first_differing_file(tmp_path):
    built = run_one_step(Step("data", build_step, tiny_build_config()), tmp_path / "made").folder
    manifest = read_json(built / "manifest.json")
    manifest["domains"]["prose"]["train"]["sha256"] = "f" * 64  # as if the published build made other shards
    record = {"dataset": {"folder": built.name, "manifest_hash": "0" * 64}}
    step = {"name": "data", "function": "glasslab.data.build:build_step",
            "config": read_json(built / "step.json")["config"], "manifest": manifest}
    with pytest.raises(UserError, match=r"first at domains\.prose\.train\.sha256 \(shards/prose/train\.bin\)"):
        find_or_build_dataset(PublishedRun("run-x", record, [], {}, {}, step), tmp_path / "replay")
