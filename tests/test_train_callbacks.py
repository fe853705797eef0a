"""The trainer's callbacks: their fixed points in order, a request to stop, the band watcher, and a
user's stateful metric carried across a real SIGKILL and resume, bit for bit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli_runner import subprocess_env
from glasslab.config import from_dict
from glasslab.ladder.preregister import BandWatcher
from glasslab.layout import checkpoint_path
from glasslab.track import RunReader
from glasslab.train import checkpoint as ckpt
from glasslab.train.callbacks import Callback, Callbacks, StopAfter
from glasslab.train.config import TrainConfig
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_data import build_tiny_dataset, tiny_run_config
from train_fakes import LossAverage, make_trainer


def small_config(**train) -> TrainConfig:
    """A TrainConfig for the synthetic stream: 8 × 16-token batches, no samples."""
    return TrainConfig(seq_len=16, global_batch_tokens=16 * 8, sample_prompts=(), peak_flops=1e11, **train)


class Recorder(Callback):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_start(self, trainer):
        self.calls.append(("start", trainer.step))

    def after_step(self, trainer, metrics):
        self.calls.append(("step", trainer.step, "train/loss" in metrics))

    def on_eval(self, trainer, metrics):
        self.calls.append(("eval", trainer.step, round(metrics["eval/macro/loss"], 6)))

    def on_checkpoint(self, trainer, path):
        self.calls.append(("checkpoint", trainer.step, path.is_dir() and path.name))

    def on_end(self, trainer, status):
        self.calls.append(("end", status))


def test_callbacks_are_told_every_step_eval_and_checkpoint_in_order(tmp_path):
    cfg = small_config(max_steps=6, eval_interval=3, checkpoint_interval=4)
    recorder = Recorder()
    trainer = make_trainer(tmp_path / "run", cfg, callbacks=[recorder])
    assert trainer.fit() == "finished"
    trainer.run.finish()
    kinds = [call[:2] for call in recorder.calls]
    # Evals come before a user's callback at the same point; the checkpoint after it, so it saves every
    # callback's state as of its step.
    assert kinds == [("start", 0), ("checkpoint", 0), ("step", 1), ("step", 2), ("eval", 3), ("step", 3),
                     ("step", 4), ("checkpoint", 4), ("step", 5), ("step", 6), ("eval", 6), ("end", "finished"),
                     ("checkpoint", 6)]
    assert all(call[2] for call in recorder.calls if call[0] == "step")  # every step logged its loss
    assert [c[2] for c in recorder.calls if c[0] == "checkpoint"] == ["step-0000000", "step-0000004",
                                                                       "step-0000006"]
    with RunReader(tmp_path / "run") as reader:
        steps, losses = reader.scalars("eval/macro/loss")
        assert reader.scalars("throughput/tokens_per_second")[0] == list(range(1, 7))  # the meter, a callback
    assert [c[2] for c in recorder.calls if c[0] == "eval"] == [round(x, 6) for x in losses] and steps == [3, 6]


class StopAtThree(Callback):
    def after_step(self, trainer, metrics):
        return trainer.step == 3


@pytest.mark.parametrize("asks", [StopAtThree, lambda: StopAfter(4)])
def test_a_callback_asks_to_stop_and_the_trainer_stops_as_a_preemption_does(tmp_path, asks):
    cfg = small_config(max_steps=10, checkpoint_interval=8)
    recorder = Recorder()
    trainer = make_trainer(tmp_path / "run", cfg, callbacks=[asks(), recorder])
    # Asked after step 3 (or before step 4), the request joins step 4's reduction: step 4 is the last.
    assert trainer.fit() == "preempted" and trainer.step == 4
    trainer.run.finish()
    assert recorder.calls[-3:] == [("step", 4, True), ("end", "preempted"), ("checkpoint", 4, "step-0000004")]
    with RunReader(tmp_path / "run") as reader:
        assert [e["step"] for e in reader.events() if e["kind"] == "preempted"] == [4]


def test_two_callbacks_with_one_name_are_refused():
    with pytest.raises(ValueError, match="LossAverage"):
        Callbacks([LossAverage(), LossAverage()])


def test_the_band_watcher_records_each_excursion_from_inside_the_loop(tmp_path):
    cfg = small_config(max_steps=8, eval_interval=2, checkpoint_interval=8)
    # A band far below any loss this tiny model reaches, except around 50% of training where it is wide.
    curve = [{"fraction": f / 8, "point": 0.5, "lo": 0.4 if f != 4 else 0.0, "hi": 0.6 if f != 4 else 100.0}
             for f in range(1, 9)]
    watcher = BandWatcher({"curve": curve})
    trainer = make_trainer(tmp_path / "run", cfg, callbacks=[watcher])
    trainer.fit()
    trainer.run.finish()
    with RunReader(tmp_path / "run") as reader:
        events = [e for e in reader.events() if e["kind"] == "prediction_out_of_band"]
    # Out at 2 (first eval), still out at 4? no: inside the wide band at 4; out again at 6, still out at 8.
    assert [e["step"] for e in events] == [2, 6]
    assert all("above" in e["title"] and e["severity"] == "warning" for e in events)
    # What it saw last is its state, in the final checkpoint: a resumed hero does not report 8 again.
    saved = ckpt.load_checkpoint(checkpoint_path(tmp_path / "run", 8), only=ckpt.HOST_PARTS)
    assert saved[ckpt.CALLBACKS_PART] == {"BandWatcher": {"was_inside": False}}


# Trains with the user's metric, and dies for real at step 7, between the checkpoints at 4 and 8.
FIRST_LIFE = """
import os, signal, sys
sys.path.insert(0, TESTS)
from glasslab.config import from_dict
from glasslab.train.callbacks import Callback
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_fakes import LossAverage

class DieAtSeven(Callback):
    def after_step(self, trainer, metrics):
        if trainer.step == 7:
            trainer.run.flush()
            os.kill(os.getpid(), signal.SIGKILL)

train(from_dict(RunConfig, CONFIG), sys.argv[1], callbacks=[LossAverage(), DieAtSeven()])
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return build_tiny_dataset(tmp_path_factory.mktemp("callbacks"))


def test_a_stateful_callback_comes_back_after_a_sigkill_and_the_run_resumes_bit_identically(tmp_path, dataset):
    config = tiny_run_config(dataset, max_steps=10, checkpoint_interval=4, eval_interval=5, sample_prompts=[])
    killed = tmp_path / "killed"
    script = FIRST_LIFE.replace("TESTS", repr(str(Path(__file__).parent))).replace("CONFIG", repr(config))
    first = subprocess.run([sys.executable, "-c", script, str(killed)], env=subprocess_env(), capture_output=True,
                           text=True, timeout=600)
    assert first.returncode == -9, first.stderr[-3000:]
    saved = ckpt.load_checkpoint(checkpoint_path(killed, 4), only=ckpt.HOST_PARTS)[ckpt.CALLBACKS_PART]
    assert saved["LossAverage"]["count"] == 4

    average = LossAverage()
    train(from_dict(RunConfig, config), killed, resume=True, callbacks=[average])
    assert average.restored == saved["LossAverage"] and average.count == 10
    whole = LossAverage()
    train(from_dict(RunConfig, config), tmp_path / "whole", callbacks=[whole])
    assert whole.restored is None and whole.total == average.total  # the same sum, in the same order

    with RunReader(killed) as resumed, RunReader(tmp_path / "whole") as uninterrupted:
        for key in ("train/loss", "custom/loss_average", "eval/macro/loss", "grad/norm/total"):
            steps, values = uninterrupted.scalars(key)
            assert steps and resumed.scalars(key) == (steps, values), key  # bit for bit
        assert uninterrupted.scalars("custom/loss_average")[0] == list(range(1, 11))
