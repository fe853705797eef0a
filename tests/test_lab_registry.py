"""The prediction registry: append-only, idempotent for the same numbers, a replacement is an incident."""

from __future__ import annotations

import multiprocessing

import pytest

from glasslab.errors import UserError
from glasslab.lab import registry
from glasslab.layout import PREDICTIONS_FILE, append_json_line, read_json_lines
from glasslab.track import read_lab_events

HERO = {"metric": "eval/macro/loss", "point": 3.6, "low": 3.5, "high": 3.8, "target": "demo-hero",
        "source": "demo-fit-0123abcd"}


def test_register_is_idempotent_and_a_replacement_keeps_the_old_entry(tmp_path):
    first = registry.register(tmp_path, "demo/hero/loss", **HERO)
    again = registry.register(tmp_path, "demo/hero/loss", **{**HERO, "source": "demo-fit-ffffffff"})
    assert again == first and len(read_json_lines(tmp_path / PREDICTIONS_FILE)) == 1

    with pytest.raises(UserError, match="already registered"):
        registry.register(tmp_path, "demo/hero/loss", **{**HERO, "point": 3.7})
    assert registry.predictions(tmp_path)["demo/hero/loss"]["point"] == 3.6

    replaced = registry.register(tmp_path, "demo/hero/loss", **{**HERO, "point": 3.7}, replace=True)
    assert (replaced["seq"], replaced["replaces"]) == (2, 1)
    assert [e["point"] for e in registry.history(tmp_path, "demo/hero/loss")] == [3.6, 3.7]
    assert registry.predictions(tmp_path)["demo/hero/loss"]["point"] == 3.7
    kinds = [(e["kind"], e["severity"]) for e in read_lab_events(tmp_path)]
    assert kinds == [("prediction_registered", "info"), ("prediction_replaced", "incident")]


def test_bad_numbers_are_refused_in_one_line(tmp_path):
    with pytest.raises(UserError, match="outside its interval"):
        registry.register(tmp_path, "x", **{**HERO, "point": 4.0})
    with pytest.raises(UserError, match="not a finite number"):
        registry.register(tmp_path, "x", **{**HERO, "low": float("nan")})
    assert not (tmp_path / PREDICTIONS_FILE).exists()


def _append_many(args):
    path, worker = args
    for i in range(200):
        append_json_line(path, {"worker": worker, "i": i, "pad": "x" * 500})


def test_concurrent_appends_never_interleave_and_a_torn_tail_is_left_out(tmp_path):
    path = tmp_path / "log.jsonl"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_append_many, [(path, w) for w in range(4)])
    records = read_json_lines(path)
    assert len(records) == 800
    assert sorted((r["worker"], r["i"]) for r in records) == [(w, i) for w in range(4) for i in range(200)]
    with open(path, "ab") as f:
        f.write(b'{"worker": 9, "i"')  # a writer killed mid-append
    assert len(read_json_lines(path)) == 800
