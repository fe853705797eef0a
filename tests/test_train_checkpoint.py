"""Checkpoints: atomic folders, sha256 manifests, retention, and falling back past damaged ones."""

from __future__ import annotations

import json

import torch

from glasslab.layout import checkpoint_problem, latest_checkpoint
from glasslab.train import checkpoint as ckpt


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
