"""Checkpoints: atomic folders, sha256 manifests, retention, and falling back past damaged ones."""

from __future__ import annotations

import json
import random

import numpy as np
import torch

from glasslab.layout import checkpoint_problem, latest_checkpoint
from glasslab.train import checkpoint as ckpt
from glasslab.train.rng import capture_rng, restore_rng, seed_everything


def _save(run_dir, step):
    parts = {"model": {"w": torch.full((64,), float(step))}, "trainer": {"step": step}}
    return ckpt.save_checkpoint(run_dir, step, parts)


def test_save_writes_a_manifest_and_loads_back(tmp_path):
    path = _save(tmp_path, 5)
    manifest = json.loads((path / "manifest.json").read_text())
    assert path.name == "step-0000005" and set(manifest["files"]) == {"model.pt", "trainer.pt"}
    assert checkpoint_problem(path) is None
    state = ckpt.load_checkpoint(path)
    assert state["trainer"]["step"] == 5 and torch.equal(state["model"]["w"], torch.full((64,), 5.0))
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))


def test_retention_keeps_the_last_k_and_every_mth(tmp_path):
    for step in range(0, 110, 10):
        _save(tmp_path, step)
        ckpt.apply_retention(tmp_path, keep_last=2, keep_every=50)
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [0, 50, 90, 100]


def test_truncated_or_corrupt_latest_falls_back_to_the_previous(tmp_path):
    for step in (10, 20, 30):
        _save(tmp_path, step)
    model_file = ckpt.checkpoint_path(tmp_path, 30) / "model.pt"
    model_file.write_bytes(model_file.read_bytes()[:-7])  # truncated
    blob = bytearray((ckpt.checkpoint_path(tmp_path, 20) / "model.pt").read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # same size, one flipped byte
    (ckpt.checkpoint_path(tmp_path, 20) / "model.pt").write_bytes(bytes(blob))
    seen = []
    step, path = latest_checkpoint(tmp_path, on_fallback=lambda s, p: seen.append((s, p)))
    assert step == 10 and path == ckpt.checkpoint_path(tmp_path, 10)
    assert [s for s, _ in seen] == [30, 20] and "truncated" in seen[0][1] and "corrupted" in seen[1][1]


def test_half_written_temp_folders_are_ignored_and_swept(tmp_path):
    _save(tmp_path, 1)
    tmp = tmp_path / "checkpoints" / ".tmp-step-0000002-123"
    tmp.mkdir()
    (tmp / "model.pt").write_bytes(b"partial")
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [1]
    ckpt.sweep_temp(tmp_path)
    assert not tmp.exists()


def test_missing_manifest_is_a_problem(tmp_path):
    path = _save(tmp_path, 3)
    (path / "manifest.json").unlink()
    assert "manifest" in checkpoint_problem(path) and latest_checkpoint(tmp_path) is None


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3)


def test_rng_states_restore_from_a_checkpoint_read_onto_another_device(tmp_path):
    """A trainer reads its checkpoint onto its device (``map_location``); the generators' states must
    still restore, which wants CPU byte tensors. ``meta`` stands in for a GPU here."""
    seed_everything(7)
    parts = {"model": {"w": torch.ones(4)}, "trainer": {"rng": capture_rng()}}
    expected = _draws()
    path = ckpt.save_checkpoint(tmp_path, 1, parts)
    state = ckpt.load_checkpoint(path, map_location="meta")
    assert state["model"]["w"].device.type == "meta"
    _draws()  # move every generator on
    restore_rng(state["trainer"]["rng"])
    again = _draws()
    assert again[:2] == expected[:2] and torch.equal(again[2], expected[2])


def test_cuda_rng_states_restore_where_fewer_gpus_are_visible(monkeypatch):
    """Saved where two GPUs were visible, resumed where one is: the visible one gets its state, and
    nothing asks for a device that is not there (torch's own set_rng_state_all would)."""
    restored = {}

    def set_rng_state(state, device=0):
        if device >= 1:
            raise RuntimeError(f"CUDA error: invalid device ordinal {device}")
        restored[device] = state

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state", set_rng_state)
    monkeypatch.setattr(torch.cuda.random, "set_rng_state", set_rng_state)
    state = capture_rng()
    state["cuda"] = [torch.full((16,), 1, dtype=torch.uint8), torch.full((16,), 2, dtype=torch.uint8)]
    restore_rng(state)
    assert list(restored) == [0] and torch.equal(restored[0], state["cuda"][0])


def test_the_published_schedule_is_step_0_powers_of_two_below_the_interval_pre_decay_and_final():
    from glasslab.train.config import ScheduleConfig, TrainConfig

    wsd = TrainConfig(max_steps=1000, checkpoint_interval=100, schedule=ScheduleConfig(kind="wsd", decay_fraction=0.2))
    assert sorted(ckpt.published_steps(wsd)) == [0, 1, 2, 4, 8, 16, 32, 64, 800, 1000]
    cosine = TrainConfig(max_steps=6, checkpoint_interval=100, schedule=ScheduleConfig(kind="cosine"))
    assert sorted(ckpt.published_steps(cosine)) == [0, 1, 2, 4, 6]


def test_extra_checkpoints_do_not_count_toward_keep_last_and_rollbacks_pass_them_by(tmp_path):
    for step in (0, 4, 10, 14, 20):
        parts = {"model": {"w": torch.full((4,), float(step))}}
        ckpt.save_checkpoint(tmp_path, step, parts, about={"extra": True} if step % 10 else None)
        ckpt.apply_retention(tmp_path, keep_last=2, keep_every=0, keep=frozenset({0, 4, 14}))
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [0, 4, 10, 14, 20]
    assert latest_checkpoint(tmp_path, at_most=19, skip_extra=True)[0] == 10
    assert latest_checkpoint(tmp_path, at_most=19)[0] == 14
