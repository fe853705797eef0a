"""The loop on a real tiny Transformer and a synthetic token stream: learning, logging, guard, rollback."""

from __future__ import annotations

import pytest
import torch

from glasslab.track import RunReader
from glasslab.train.config import GuardConfig, OptimizerConfig, ScheduleConfig, TrainConfig
from glasslab.train.host_syncs import count_host_syncs
from train_fakes import SyntheticLoader, make_trainer


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread, as the CLI tests' subprocesses use: faster on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _cfg(**kw) -> TrainConfig:
    base = dict(seq_len=16, global_batch_tokens=16 * 16, max_steps=40, checkpoint_interval=10,
                optimizer=OptimizerConfig(lr=1e-2), schedule=ScheduleConfig(kind="constant", warmup_fraction=0.0),
                guard=GuardConfig(window=20, min_history=8, sigma=6.0, max_consecutive=2))
    base.update(kw)
    return TrainConfig(**base)


def test_tiny_moe_learns_and_logs_every_named_metric(tmp_path):
    trainer = make_trainer(tmp_path, _cfg(eval_interval=20), moe=True)
    assert trainer.fit() == "finished"
    trainer.run.finish()
    with RunReader(tmp_path) as reader:
        steps, losses = reader.scalars("train/loss")
        keys = set(reader.scalar_keys())
        vectors = set(reader.vector_keys())
        eval_steps, _ = reader.scalars("eval/macro/loss")
    assert steps == list(range(1, 41))
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5, losses
    for key in ("optim/learning_rate", "train/tokens", "grad/norm/total", "grad/norm/attn", "grad/norm/experts",
                "params/norm/total", "params/norm/router", "params/norm/embed", "moe/layer_0/router_bias_norm",
                "moe/layer_1/load_max_violation", "moe/layer_0/routing_entropy", "throughput/tokens_per_second",
                "throughput/mfu", "memory/peak_bytes", "mixture/weight/synthetic", "eval/synthetic/bpb"):
        assert key in keys, key
    assert {"moe/layer_0/expert_load", "moe/layer_0/router_bias"} <= vectors
    assert eval_steps == [20, 40]
    assert trainer.last_metrics["eval/macro/loss"] < 3.0


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_a_step_waits_for_the_device_at_most_three_times(tmp_path, moe):
    """Every per-step scalar (loss, grad and parameter norms, each MoE layer's routing statistics) still
    logged, from at most three transfers to the host: on a GPU each one stalls the queue of kernels."""
    trainer = make_trainer(tmp_path, _cfg(max_steps=10, micro_batch_size=4), moe=moe)
    trainer.train_step()  # the first step initialises the optimiser's state
    with count_host_syncs() as syncs:
        metrics = [trainer.train_step() for _ in range(3)]
    assert sum(syncs.values()) <= 3 * 3, dict(syncs)
    expected = {"train/loss", "grad/norm/total", "params/norm/total", "optim/learning_rate"}
    if moe:
        expected |= {f"moe/layer_{i}/{name}" for i in (0, 1)
                     for name in ("load_max_violation", "routing_entropy", "router_bias_norm", "dropped_tokens")}
    assert all(expected <= m.keys() for m in metrics)
    trainer.run.finish()


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    curves = []
    for micro in (0, 2):
        trainer = make_trainer(tmp_path / str(micro), _cfg(max_steps=6, micro_batch_size=micro), moe=True)
        trainer.fit()
        trainer.run.finish()
        with RunReader(tmp_path / str(micro)) as reader:
            curves.append(reader.scalars("train/loss")[1])
    assert curves[0] == pytest.approx(curves[1], rel=1e-5)


class _BadBatchAt(SyntheticLoader):
    """Serves uniform-random tokens (far off the learned pattern) for the batches in ``bad``."""

    def __init__(self, *args, bad=(), **kw):
        super().__init__(*args, **kw)
        self.bad = set(bad)

    def next_batch(self):
        batch = super().next_batch()
        if self.position in self.bad:
            return torch.randint(0, 64, batch.shape, generator=torch.Generator().manual_seed(self.position))
        return batch


def test_a_bad_batch_is_skipped_and_recorded(tmp_path):
    cfg = _cfg()
    trainer = make_trainer(tmp_path, cfg, loader=_BadBatchAt(cfg.seq_len, cfg.global_batch_size, bad={30}))
    assert trainer.fit() == "finished"
    trainer.run.finish()
    with RunReader(tmp_path) as reader:
        events = reader.events()
        steps, _ = reader.scalars("train/loss")
    skipped = [e for e in events if e["kind"] == "spike_skipped"]
    assert [e["step"] for e in skipped] == [30] and skipped[0]["severity"] == "warning"
    assert 30 not in steps and 31 in steps and not any(e["kind"] == "rollback" for e in events)


def test_repeated_spikes_roll_back_and_skip_the_data_window(tmp_path):
    cfg = _cfg()
    loader = _BadBatchAt(cfg.seq_len, cfg.global_batch_size, bad={25, 26})
    trainer = make_trainer(tmp_path, cfg, loader=loader)
    assert trainer.fit() == "finished"
    trainer.run.finish()
    with RunReader(tmp_path) as reader:
        events = reader.events()
        attempts = reader.attempts()
        steps, losses = reader.scalars("train/loss")
    rollbacks = [e for e in events if e["kind"] == "rollback"]
    assert len(rollbacks) == 1 and rollbacks[0]["severity"] == "incident" and rollbacks[0]["step"] == 26
    assert "to 20" in rollbacks[0]["title"] and "skipping 6 batches" in rollbacks[0]["title"]
    assert [a["reason"] for a in attempts] == ["start", "rollback"] and attempts[1]["start_step"] == 21
    assert steps == list(range(1, 41)) and max(losses[-10:]) < losses[0]
    assert loader.position == 40 + 6  # 40 steps plus the skipped window (batches 21-26)


def test_an_lr_blow_up_is_rolled_back(tmp_path, monkeypatch):
    from glasslab.train import loop

    real = loop.lr_multiplier
    fired = []

    def blow_up_once(cfg, step, total):
        if step == 22 and not fired:
            fired.append(step)
            return 3000.0
        return real(cfg, step, total)

    monkeypatch.setattr(loop, "lr_multiplier", blow_up_once)
    trainer = make_trainer(tmp_path, _cfg(grad_clip=0.0))
    assert trainer.fit() == "finished"
    trainer.run.finish()
    with RunReader(tmp_path) as reader:
        kinds = [e["kind"] for e in reader.events()]
        _, losses = reader.scalars("train/loss")
    assert "spike_skipped" in kinds and "rollback" in kinds
    assert losses[-1] < losses[0]


def test_nonfinite_steps_are_never_applied(tmp_path):
    cfg = _cfg(max_steps=20)

    class PoisonOnce(SyntheticLoader):
        def next_batch(self):
            if self.position == 14:  # corrupt the weights the next forward uses: loss becomes NaN
                with torch.no_grad():
                    trainer.model.embed.weight[0, 0] = float("nan")
            return super().next_batch()

    trainer = make_trainer(tmp_path, cfg, loader=PoisonOnce(cfg.seq_len, cfg.global_batch_size))
    assert trainer.fit() == "finished"
    trainer.run.finish()
    with RunReader(tmp_path) as reader:
        events = reader.events()
    kinds = [e["kind"] for e in events if e["kind"] in ("nonfinite", "rollback")]
    assert kinds == ["nonfinite", "nonfinite", "rollback"]
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_activation_checkpointing_changes_memory_not_results(tmp_path):
    from glasslab.train.build import checkpoint_activations

    results = []
    for recompute in (False, True):
        trainer = make_trainer(tmp_path / str(recompute), _cfg(max_steps=4), moe=True)
        if recompute:
            checkpoint_activations(trainer.model.blocks)
        trainer.fit()
        trainer.run.finish()
        with RunReader(tmp_path / str(recompute)) as reader:
            results.append((reader.scalars("train/loss")[1], reader.vectors("moe/layer_0/expert_load")[1]))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-6)
    assert results[0][1] == results[1][1]  # recomputed forwards are not counted twice by the balancer


def test_muon_trains_the_tiny_moe(tmp_path):
    cfg = _cfg(max_steps=30, optimizer=OptimizerConfig(name="muon", lr=1e-2, muon_lr=0.05))
    trainer = make_trainer(tmp_path, cfg, moe=True)
    assert [g["label"] for g in trainer.optimizer.param_groups] == ["decay", "no_decay", "muon"]
    trainer.fit()
    trainer.run.finish()
    with RunReader(tmp_path) as reader:
        losses = reader.scalars("train/loss")[1]
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5, losses


def test_kept_log_checkpoints_are_listed_and_never_change_where_a_rollback_returns(tmp_path):
    """``train.keep_log`` writes 0, 1, 2, 4, 8 (below the interval of 16) and 24 (the last step before the
    WSD decay) as well; a rollback at 26 still returns to 16, not to the extra 24, so the run's losses,
    rollback and weights are bit for bit those of the run without them."""
    import json

    from glasslab.layout import read_json
    from glasslab.model.load import weights_sha256
    from glasslab.train import checkpoint as ckpt

    schedule = ScheduleConfig(kind="wsd", warmup_fraction=0.0, decay_fraction=0.4)
    runs = {}
    for keep_log in (False, True):
        cfg = _cfg(checkpoint_interval=16, keep_log=keep_log, schedule=schedule)
        loader = _BadBatchAt(cfg.seq_len, cfg.global_batch_size, bad={25, 26})
        trainer = make_trainer(tmp_path / str(keep_log), cfg, loader=loader)
        assert trainer.fit() == "finished"
        trainer.run.finish()
        with RunReader(tmp_path / str(keep_log)) as reader:
            rollbacks = [e["title"] for e in reader.events() if e["kind"] == "rollback"]
            runs[keep_log] = (reader.scalars("train/loss"), rollbacks, trainer.replica_fingerprint())
    assert runs[True] == runs[False] and "to 16" in runs[True][1][0]

    run_dir = tmp_path / "True"
    listed = json.loads((run_dir / "checkpoints.json").read_text())["checkpoints"]
    assert [c["step"] for c in listed] == [0, 1, 2, 4, 8, 24, 32, 40]
    assert [c["step"] for c in listed if c["extra"]] == [1, 2, 4, 8, 24]
    assert [c["tokens"] for c in listed] == [c["step"] * 256 for c in listed]
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path / "False")] == [32, 40]
    final = listed[-1]
    assert final["weights_sha256"] == runs[True][2]
    for entry in listed:  # the listed hashes are the files' and the weights' own, recomputed from disk
        path = ckpt.checkpoint_path(run_dir, entry["step"])
        assert entry["files"] == {n: f["sha256"] for n, f in read_json(path / "manifest.json")["files"].items()}
        state = torch.load(path / "model.pt", weights_only=True)
        assert weights_sha256(state) == entry["weights_sha256"]
    assert len({c["weights_sha256"] for c in listed}) == len(listed)  # every kept step holds other weights
