"""One ``glasslab train`` run looks at its inputs once: the dataset is resolved, the loader built, the sinks and
a resume's config checked exactly once per run (they were run two or three times, once by the command and
again by the step it runs)."""

from __future__ import annotations

import sys
from collections import Counter

import yaml

import glasslab.data.loader
import glasslab.track.sinks
import glasslab.train.build
import glasslab.train.run
from glasslab.cli import main as cli_main
from glasslab.lab import read_step_record
from glasslab.lab.status import write_step_record
from train_data import build_tiny_dataset, tiny_run_config

COUNTED = {
    "resolve_data": glasslab.train.build.resolve_data,
    "Loader": glasslab.data.loader.Loader,
    "check_sinks": glasslab.track.sinks.check_sinks,
    "check_resumable": glasslab.train.run.check_resumable,
}


def _count_calls(monkeypatch) -> Counter:
    """Every loaded glasslab module's name for each counted function, replaced by one that counts its calls."""
    calls: Counter = Counter()

    def counting(name, original):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)

        return wrapper

    for module in [m for name, m in sys.modules.items() if name.startswith("glasslab")]:
        for name, original in COUNTED.items():
            for attr, value in list(vars(module).items()):
                if value is original:
                    monkeypatch.setattr(module, attr, counting(name, original))
    return calls


def test_one_train_run_resolves_builds_and_checks_once(tmp_path, monkeypatch, capsys):
    config = tiny_run_config(build_tiny_dataset(tmp_path), max_steps=2, checkpoint_interval=2, sample_prompts=[])
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "run"
    calls = _count_calls(monkeypatch)
    assert cli_main(["train", str(tmp_path / "run.yaml"), "--run-dir", str(run_dir)]) == 0
    assert calls == {"resolve_data": 1, "Loader": 1, "check_sinks": 1}

    record = read_step_record(run_dir)  # an attempt that died after its last checkpoint: --resume takes it up
    write_step_record(run_dir, {**record, "status": "failed", "error": "killed"})
    calls.clear()
    assert cli_main(["train", str(tmp_path / "run.yaml"), "--run-dir", str(run_dir), "--resume"]) == 0, (
        capsys.readouterr().err
    )
    assert calls == {"resolve_data": 1, "Loader": 1, "check_sinks": 1, "check_resumable": 1}
