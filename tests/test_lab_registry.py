"""The prediction registry: append-only, idempotent for the same numbers, a replacement is an incident; one
file per entry, so writers racing for a number never lose an entry, and a lab's old single file still reads."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from glasslab.errors import UserError
from glasslab.lab import registry
from glasslab.layout import LAB_EVENTS_DB, PREDICTIONS_DIR, PREDICTIONS_FILE, append_json_line, read_json_lines
from glasslab.track import log_lab_event, read_lab_events
from glasslab.track.lab_events import SCHEMA as EVENTS_SCHEMA
from glasslab.track.store import connect

HERO = {"metric": "eval/macro/loss", "point": 3.6, "low": 3.5, "high": 3.8, "target": "demo-hero",
        "source": "demo-fit-0123abcd"}


def test_register_is_idempotent_and_a_replacement_keeps_the_old_entry(tmp_path):
    first = registry.register(tmp_path, "demo/hero/loss", **HERO)
    again = registry.register(tmp_path, "demo/hero/loss", **{**HERO, "source": "demo-fit-ffffffff"})
    assert again == first and len(registry.registry_entries(tmp_path)) == 1

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
    assert not (tmp_path / PREDICTIONS_DIR).exists() and registry.registry_entries(tmp_path) == []


def test_writers_racing_for_numbers_lose_no_entry_and_one_name_gets_one_prediction(tmp_path):
    start, refused = threading.Barrier(10), []

    def write(name: str, point: float) -> None:
        start.wait()
        try:
            registry.register(tmp_path, name, **{**HERO, "point": point})
        except UserError:
            refused.append(point)

    writers = [threading.Thread(target=write, args=(f"n{i}", 3.6)) for i in range(8)]
    writers += [threading.Thread(target=write, args=("same", point)) for point in (3.6, 3.7)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    entries = registry.registry_entries(tmp_path)
    assert sorted(p.name for p in (tmp_path / PREDICTIONS_DIR).iterdir()) == [f"{n:08d}.json" for n in range(1, 10)]
    assert sorted(e["name"] for e in entries) == sorted([f"n{i}" for i in range(8)] + ["same"])
    assert len(refused) == 1 and registry.predictions(tmp_path)["same"]["point"] != refused[0]


def test_a_lab_from_before_reads_its_old_registry_and_event_log_first(tmp_path):
    old = {"name": "old/loss", "metric": "eval/macro/loss", "point": 3.6, "low": 3.5, "high": 3.8, "level": 0.9,
           "target": "old-hero", "source": "old-fit", "registered_at": "2026-01-01T00:00:00Z", "seq": 1}
    append_json_line(tmp_path / PREDICTIONS_FILE, old)
    conn = connect(tmp_path / LAB_EVENTS_DB, schema=EVENTS_SCHEMA)
    conn.execute("INSERT INTO events(time, kind, severity, subject, title, body, host, pid) VALUES "
                 "(1.0, 'step_started', 'info', 'old-hero', 'old', '', 'h', 1)")
    conn.close()
    with pytest.raises(UserError, match="already registered"):
        registry.register(tmp_path, "old/loss", **{**HERO, "point": 3.7})
    registry.register(tmp_path, "new/loss", **HERO)
    log_lab_event(tmp_path, "note", "new-hero", "new")
    assert [e["name"] for e in registry.registry_entries(tmp_path)] == ["old/loss", "new/loss"]
    assert [e["title"] for e in read_lab_events(tmp_path)][0::2] == ["old", "new"]  # old first, then by time
    assert len(read_json_lines(tmp_path / PREDICTIONS_FILE)) == 1  # never written again


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
