"""The trainer's hook contract: post_step, post_eval and post_checkpoint at their fixed points, and
the hero's band watcher as a hook (no side thread)."""

from __future__ import annotations

from glasslab.ladder.preregister import BandWatcher
from glasslab.track import RunReader
from glasslab.train.config import TrainConfig
from glasslab.train.hooks import TrainerHook
from train_fakes import make_trainer


class Recorder(TrainerHook):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def post_step(self, trainer, metrics):
        self.calls.append(("step", trainer.step, "train/loss" in metrics))

    def post_eval(self, trainer, metrics):
        self.calls.append(("eval", trainer.step, round(metrics["eval/macro/loss"], 6)))

    def post_checkpoint(self, trainer, path):
        self.calls.append(("checkpoint", trainer.step, path.is_dir() and path.name))


def test_hooks_are_told_every_step_eval_and_checkpoint_in_order(tmp_path):
    cfg = TrainConfig(seq_len=16, global_batch_tokens=16 * 8, max_steps=6, eval_interval=3, checkpoint_interval=4,
                      sample_prompts=(), peak_flops=1e11)
    recorder = Recorder()
    trainer = make_trainer(tmp_path / "run", cfg, hooks=[recorder])
    assert trainer.fit() == "finished"
    trainer.run.finish()
    kinds = [(kind, step) for kind, step, _ in recorder.calls]
    assert kinds == [("checkpoint", 0), ("step", 1), ("step", 2), ("eval", 3), ("step", 3), ("checkpoint", 4),
                     ("step", 4), ("step", 5), ("step", 6), ("eval", 6), ("checkpoint", 6)]
    assert all(applied for kind, _, applied in recorder.calls if kind == "step")  # every step logged its loss
    assert [c[2] for c in recorder.calls if c[0] == "checkpoint"] == ["step-0000000", "step-0000004",
                                                                       "step-0000006"]
    with RunReader(tmp_path / "run") as reader:
        steps, losses = reader.scalars("eval/macro/loss")
    assert [c[2] for c in recorder.calls if c[0] == "eval"] == [round(x, 6) for x in losses] and steps == [3, 6]


def test_the_band_watcher_records_each_excursion_from_inside_the_loop(tmp_path):
    cfg = TrainConfig(seq_len=16, global_batch_tokens=16 * 8, max_steps=8, eval_interval=2, checkpoint_interval=8,
                      sample_prompts=(), peak_flops=1e11)
    # A band far below any loss this tiny model reaches, except around 50% of training where it is wide.
    curve = [{"fraction": f / 8, "point": 0.5, "lo": 0.4 if f != 4 else 0.0, "hi": 0.6 if f != 4 else 100.0}
             for f in range(1, 9)]
    trainer = make_trainer(tmp_path / "run", cfg, hooks=[BandWatcher({"curve": curve})])
    trainer.fit()
    trainer.run.finish()
    with RunReader(tmp_path / "run") as reader:
        events = [e for e in reader.events() if e["kind"] == "prediction_out_of_band"]
    # Out at 2 (first eval), still out at 4? no: inside the wide band at 4; out again at 6, still out at 8.
    assert [e["step"] for e in events] == [2, 6]
    assert all("above" in e["title"] and e["severity"] == "warning" for e in events)
