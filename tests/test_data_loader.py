"""The loader: exact resume, rank splits, phases, epoch caps, packing, eval batches, mixture plans."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import torch

from data_helpers import build_small
from glasslab.config import ConfigError, from_dict
from glasslab.data.config import DataConfig, MixtureConfig, PhaseConfig
from glasslab.data.loader import DataExhausted, DomainStream, Loader, eval_batches, eval_bytes_per_token
from glasslab.data.mixture import plan_mixture
from glasslab.data.shards import open_shard
from glasslab.errors import UserError


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return build_small(tmp_path_factory.mktemp("loader"))


def _cfg(ds, seed=0, **mixture) -> DataConfig:
    mixture.setdefault("weights", {"alpha": 0.7, "beta": 0.3})
    return DataConfig(path=str(ds), mixture=MixtureConfig(**mixture), seed=seed)


def _batches(loader: Loader, n: int) -> list[torch.Tensor]:
    return [loader.next_batch() for _ in range(n)]


def test_resume_mid_run_gives_identical_batches(ds):
    first = Loader(_cfg(ds), seq_len=64, global_batch=16)
    _batches(first, 7)
    state = json.loads(json.dumps(first.state_dict()))  # states travel through checkpoints as plain data
    expected = _batches(first, 150)  # far enough to cross an epoch of beta
    assert first.epochs()["beta"] > 1.0
    resumed = Loader(_cfg(ds), seq_len=64, global_batch=16)
    resumed.load_state_dict(state)
    for want, got in zip(expected, _batches(resumed, 150), strict=True):
        assert torch.equal(want, got)
    other_seed = Loader(_cfg(ds, seed=1), seq_len=64, global_batch=16)
    assert not torch.equal(_batches(other_seed, 8)[-1], expected[0])


def test_the_next_batch_is_read_ahead_in_another_thread_without_touching_the_state(ds, monkeypatch):
    """The thread reads step s+1 while step s trains; the state counts only returned batches, and a
    read-ahead that no longer follows the state (after a load or a skip) is dropped: every batch is
    the one a loader without read-ahead returns."""
    readers: list[str] = []
    read_window = DomainStream.read_window

    def recording(self, index, window):
        readers.append(threading.current_thread().name)
        return read_window(self, index, window)

    monkeypatch.setattr(DomainStream, "read_window", recording)
    plain = Loader(_cfg(ds), seq_len=16, global_batch=8, prefetch=False)
    expected, states = [], []
    for _ in range(7):
        expected.append(plain.next_batch())
        states.append(plain.state_dict())
    readers.clear()
    ahead = Loader(_cfg(ds), seq_len=16, global_batch=8)
    for want, state in zip(expected[:3], states[:3], strict=True):
        assert torch.equal(ahead.next_batch(), want)
        assert ahead.state_dict() == state  # the read-ahead of the next step is not in the state
    on_main = [name for name in readers if not name.startswith("glasslab-loader")]
    assert len(on_main) == 8 and len(readers) >= 3 * 8  # only the first batch's 8 rows waited for a read
    ahead.skip(2)  # drops the read-ahead of the step it skips
    assert ahead.state_dict() == states[4]
    ahead.load_state_dict(states[1])  # back: the read-ahead (now of a later step) is dropped again
    assert [torch.equal(ahead.next_batch(), want) for want in expected[2:]] == [True] * 5
    assert ahead.state_dict() == states[-1]


def test_ranks_split_each_global_batch_without_overlap_or_gaps(ds):
    single = _batches(Loader(_cfg(ds), seq_len=16, global_batch=8), 12)
    for world in (2, 4):
        ranks = [Loader(_cfg(ds), seq_len=16, global_batch=8, rank=r, world_size=world) for r in range(world)]
        for step, want in enumerate(single):
            parts = [r.next_batch() for r in ranks]
            assert all(p.shape == (8 // world, 17) for p in parts)
            assert torch.equal(torch.cat(parts), want), (world, step)


def test_resume_may_change_world_size(ds):
    single = Loader(_cfg(ds), seq_len=16, global_batch=8)
    _batches(single, 5)
    state = single.state_dict()
    expected = _batches(single, 5)
    ranks = [Loader(_cfg(ds), seq_len=16, global_batch=8, rank=r, world_size=2) for r in range(2)]
    for r in ranks:
        r.load_state_dict(state)
    for want in expected:
        assert torch.equal(torch.cat([r.next_batch() for r in ranks]), want)
    assert ranks[0].state_dict() == ranks[1].state_dict() == single.state_dict()


def test_skip_matches_reading_and_state_mismatch_is_refused(ds):
    read = Loader(_cfg(ds), seq_len=16, global_batch=4)
    _batches(read, 9)
    skipped = Loader(_cfg(ds), seq_len=16, global_batch=4)
    skipped.skip(9)
    assert skipped.state_dict() == read.state_dict()
    assert torch.equal(skipped.next_batch(), read.next_batch())
    with pytest.raises(UserError, match="global_batch=4 does not match this run's 8"):
        Loader(_cfg(ds), seq_len=16, global_batch=8).load_state_dict(read.state_dict())


def test_phases_switch_weights_at_their_start_step(ds):
    cfg = _cfg(
        ds,
        weights={"alpha": 1.0},
        phases=(
            PhaseConfig(start_step=3, weights={"beta": 2.0, "alpha": 2.0}),
            PhaseConfig(start_step=6, weights={"beta": 1.0}),
        ),
    )
    loader = Loader(cfg, seq_len=16, global_batch=64)
    seen = []
    for _ in range(8):
        loader.next_batch()
        seen.append(loader.last_batch_domains.count("alpha") / 64)
    assert seen[:3] == [1.0, 1.0, 1.0] and seen[6:] == [0.0, 0.0]
    assert all(0.3 < s < 0.7 for s in seen[3:6])  # 50/50 by weight, drawn at random
    assert loader.weights_at(2) == {"alpha": 1.0} and loader.weights_at(4) == {"alpha": 0.5, "beta": 0.5}
    assert loader.weights_at(100) == {"beta": 1.0}


def test_epoch_caps_take_a_domain_out_then_exhaust(ds):
    cfg = _cfg(ds, weights={"alpha": 0.9, "beta": 0.1}, epoch_caps={"alpha": 0.25})
    loader = Loader(cfg, seq_len=32, global_batch=16)
    alpha_tokens = open_shard(ds, "alpha", "train").num_tokens
    after = []
    while loader.cursors["alpha"] + 33 <= 0.25 * alpha_tokens:
        loader.next_batch()
    for _ in range(3):
        loader.next_batch()
        after += loader.last_batch_domains
    assert set(after) == {"beta"} and loader.epochs()["alpha"] <= 0.25
    capped_both = Loader(_cfg(ds, epoch_caps={"alpha": 0.05, "beta": 0.05}), seq_len=32, global_batch=16)
    with pytest.raises(DataExhausted, match="data exhausted"):
        for _ in range(1000):
            last_complete = capped_both.state_dict()
            capped_both.next_batch()
    assert capped_both.epochs()["alpha"] <= 0.05 and capped_both.epochs()["beta"] <= 0.05
    assert capped_both.state_dict() == last_complete  # a failed draw leaves the state alone


def test_a_step_drawn_all_at_once_is_the_step_drawn_row_by_row(ds):
    """The vectorised draw (every step but those where a domain reaches its cap) picks the same domains
    and positions as drawing the rows one by one, across phases, three domains' weights and a cap."""
    alpha_tokens = open_shard(ds, "alpha", "train").num_tokens
    cap = 30 * 10 * 17 / alpha_tokens  # alpha runs out near step 30 (about 10 of its rows a step)
    cfg = _cfg(ds, weights={"alpha": 0.6, "beta": 0.4}, epoch_caps={"alpha": cap},
               phases=[PhaseConfig(start_step=20, weights={"alpha": 0.7, "beta": 0.3})])
    loader = Loader(cfg, seq_len=16, global_batch=24, prefetch=False)
    row_by_row, fell_back = loader._plan_row_by_row, []
    loader._plan_row_by_row = lambda step, *rest: fell_back.append(step) or row_by_row(step, *rest)
    for step in range(60):
        uniforms = np.random.default_rng([cfg.seed, step]).random(24)
        expected = row_by_row(step, loader.cursors, loader.weights_at(step), uniforms)
        plan, loader.cursors = loader._plan(step, loader.cursors)
        assert (plan, loader.cursors) == expected, step
    # Row by row only where alpha reached its cap; all at once before and after (beta alone).
    assert 1 <= len(fell_back) <= 3 and 15 < fell_back[0] and loader.epochs()["alpha"] <= cap


def test_one_epoch_packs_every_document_once_in_shuffled_order(ds):
    shard = open_shard(ds, "alpha", "train")
    loader = Loader(_cfg(ds, weights={"alpha": 1.0}), seq_len=63, global_batch=1)
    steps = shard.num_tokens // 64
    stream = torch.cat(_batches(loader, steps), dim=1).flatten().numpy()
    all_counts = np.bincount(shard.tokens, minlength=512)
    counts = np.bincount(stream, minlength=512)
    assert np.all(counts <= all_counts) and all_counts.sum() - counts.sum() < 64
    assert not np.array_equal(stream, np.asarray(shard.tokens[: stream.size]))  # documents reordered
    # Each sequence is whole documents back to back: every EOT is followed by the start of some document.
    eot = json.loads((ds / "manifest.json").read_text())["eot_id"]
    starts = {int(shard.document(i)[0]) for i in range(len(shard.ends))}
    rows = stream.reshape(steps, 64)
    after_eot = rows[:, 1:][rows[:, :-1] == eot]
    assert set(after_eot.tolist()) <= starts


def test_windows_are_read_in_a_shuffled_order_that_covers_the_epoch(ds):
    """One long document must not fill consecutive batches: a domain's sequences are its epoch's windows
    in a shuffled order, each window once."""
    stream = DomainStream(open_shard(ds, "alpha", "train"), seed=0, domain="alpha")
    count = stream.tokens_per_epoch // 64
    position_of = {stream.read(k * 64, 64).tobytes(): k for k in range(count)}
    order = [position_of[stream.read_window(i, 64).tobytes()] for i in range(count)]
    assert len(set(order)) >= 0.99 * count  # every window once (identical windows aside)
    assert np.mean(np.diff(order) == 1) < 0.05  # consecutive sequences are rarely neighbours
    assert stream.read_window(count, 64).tobytes() != stream.read_window(0, 64).tobytes()  # next epoch


def test_bad_mixtures_fail_before_any_compute(ds, tmp_path):
    with pytest.raises(UserError, match="empty mixture"):
        Loader(DataConfig(path=str(ds)), seq_len=16, global_batch=4)
    with pytest.raises(UserError, match=r"unknown domain 'gamma' \(dataset domains: alpha, beta\)"):
        Loader(_cfg(ds, weights={"alpha": 1, "gamma": 1}), seq_len=16, global_batch=4)
    with pytest.raises(ConfigError, match="mixture.weights.beta=-0.5: expected a weight >= 0"):
        from_dict(DataConfig, {"path": str(ds), "mixture": {"weights": {"alpha": 1, "beta": -0.5}}})
    with pytest.raises(UserError, match="not a built dataset"):
        Loader(DataConfig(path=str(tmp_path), mixture=MixtureConfig(weights={"a": 1})), 16, 4)
    with pytest.raises(UserError, match="does not split evenly"):
        Loader(_cfg(ds), seq_len=16, global_batch=6, rank=0, world_size=4)


def test_eval_batches_and_bytes_per_token(ds):
    manifest = json.loads((ds / "manifest.json").read_text())
    entry = manifest["domains"]["beta"]["eval"]
    batches = list(eval_batches(ds, "beta", seq_len=31, batch_size=4))
    rows = sum(b.shape[0] for b in batches)
    assert rows == entry["tokens"] // 32 and all(b.shape[1] == 32 and b.dtype == torch.int64 for b in batches)
    assert all(torch.equal(a, b) for a, b in zip(batches, eval_batches(ds, "beta", 31, 4), strict=True))
    assert sum(b.shape[0] for b in eval_batches(ds, "beta", 31, 4, max_tokens=100)) == 3
    assert eval_bytes_per_token(ds, "beta") == pytest.approx(entry["bytes"] / entry["tokens"])
    with pytest.raises(UserError, match="fewer than one window"):
        next(eval_batches(ds, "beta", seq_len=10**7, batch_size=1))


def test_plan_mixture_realises_tokens_and_epochs_up_front():
    mixture = MixtureConfig(
        weights={"a": 3, "b": 1},
        phases=(PhaseConfig(start_step=50, weights={"b": 1}),),
        epoch_caps={"a": 1.0},
    )
    plan = plan_mixture(mixture, {"a": 600, "b": 10_000}, token_budget=2000, tokens_per_step=10)
    first, second = plan["phases"]
    assert first["tokens"] == {"a": 375, "b": 125} and second["tokens"] == {"a": 0, "b": 1500}
    assert plan["total"]["epochs"] == {"a": pytest.approx(0.625), "b": pytest.approx(0.1625)}
    # A cap takes a domain out and the others absorb its share.
    capped = plan_mixture(
        MixtureConfig(weights={"a": 1, "b": 1}, epoch_caps={"a": 0.5}),
        {"a": 600, "b": 10_000},
        token_budget=2000,
        tokens_per_step=10,
    )
    assert capped["total"]["tokens"] == {"a": 300, "b": 1700} and capped["shortfall"] == 0
