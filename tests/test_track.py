"""The run store and tracker: concurrent readers, SIGKILL safety, the writer lease, attempts, sinks."""

from __future__ import annotations

import glob
import json
import signal
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_runner import run_cli, subprocess_env
from glasslab import track
from glasslab.errors import UserError

WRITER = """
import sys, time
from glasslab import track
run_dir = sys.argv[1]
steps, keys, flush_every = (int(a) for a in sys.argv[2:5])
sleep = float(sys.argv[5])
run = track.init(run_dir, {"train": {"lr": 1e-3}})
names = [f"m/{k}" for k in range(keys)]
for step in range(steps):
    run.log({name: step + k / 100 for k, name in enumerate(names)}, step)
    if flush_every and step % flush_every == flush_every - 1:
        run.flush()
        print("committed", step, flush=True)
    if sleep:
        time.sleep(sleep)
print("ready", flush=True)
if sleep:
    time.sleep(3600)
run.finish()
"""


def start_writer(run_dir: Path, steps: int, keys: int, flush_every: int = 0, sleep: float = 0.0):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(run_dir), str(steps), str(keys), str(flush_every), str(sleep)],
        stdout=subprocess.PIPE, text=True, env=subprocess_env(),
    )


def test_writes_10000_steps_of_20_scalars_while_a_reader_reads(tmp_path):
    run_dir = tmp_path / "run"
    writer = start_writer(run_dir, steps=10_000, keys=20)
    seen = []
    while writer.poll() is None:
        if (run_dir / "metrics.db").exists():
            try:
                with track.RunReader(run_dir) as reader:
                    seen.append(len(reader.scalars("m/3")[0]))
            except UserError:
                pass
        time.sleep(0.05)
    assert writer.returncode == 0
    assert seen == sorted(seen), "a reader saw the series shrink"
    with track.RunReader(run_dir) as reader:
        assert len(reader.scalar_keys()) == 20
        steps, values = reader.scalars("m/19")
        assert steps == list(range(10_000))
        assert values[1234] == pytest.approx(1234.19)
        assert reader.meta("status") == "finished"


def test_sigkill_leaves_every_committed_step(tmp_path):
    run_dir = tmp_path / "run"
    writer = start_writer(run_dir, steps=100_000, keys=5, flush_every=50)
    committed = -1
    for line in writer.stdout:
        committed = int(line.split()[1])
        if committed >= 2_000:
            break
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    conn = sqlite3.connect(run_dir / "metrics.db")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with track.RunReader(run_dir) as reader:
        for key in reader.scalar_keys():
            steps, _ = reader.scalars(key)
            assert steps[: committed + 1] == list(range(committed + 1))


def test_second_writer_refused_while_a_note_lands(tmp_path):
    run_dir = tmp_path / "lab" / "run-1"
    writer = start_writer(run_dir, steps=3, keys=2, sleep=0.01)
    assert writer.stdout.readline().strip() == "ready"
    with pytest.raises(UserError, match=f"already being written by pid {writer.pid}"):
        track.init(run_dir, {})
    result = run_cli("note", "run-1", "Loss looks fine\nchecked by hand", "--step", "2", "--lab", str(tmp_path / "lab"))
    assert result.returncode == 0, result.stderr
    with track.RunReader(run_dir) as reader:
        notes = [e for e in reader.events() if e["kind"] == "note"]
    assert notes and notes[0]["title"] == "Loss looks fine" and notes[0]["body"] == "checked by hand"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    run = track.init(run_dir, {}, reason="resume")  # the dead holder's lease is taken over
    assert run.attempt == 2
    run.finish()


def test_note_errors_are_one_line(tmp_path):
    result = run_cli("note", "nope", "hello", "--lab", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "no run store" in result.stderr
    assert "Traceback" not in result.stderr


def test_resumed_steps_take_the_latest_attempt(tmp_path):
    run = track.init(tmp_path, {"a": 1})
    for step in range(10):
        run.log({"train/loss": float(step)}, step)
    run.finish("failed")
    run = track.init(tmp_path, {"a": 1}, reason="resume")
    for step in range(5, 10):
        run.log({"train/loss": 100.0 + step}, step)
    run.finish()
    with track.RunReader(tmp_path) as reader:
        steps, values = reader.scalars("train/loss")
        assert steps == list(range(10))
        assert values == [0.0, 1.0, 2.0, 3.0, 4.0, 105.0, 106.0, 107.0, 108.0, 109.0]
        assert [(a["attempt"], a["start_step"], a["reason"]) for a in reader.attempts()] == [
            (1, 0, "start"), (2, 5, "resume")]


def test_run_record_is_written_once_with_secrets_redacted(tmp_path):
    run = track.init(tmp_path, {"train": {"wandb_api_key": "abc", "lr": 0.1}}, record_extra={"size_name": "1M-A1M"})
    run.finish()
    record = track.read_record(tmp_path)
    assert record["config"]["train"] == {"wandb_api_key": "***redacted***", "lr": 0.1}
    assert record["size_name"] == "1M-A1M"
    assert {"torch", "numpy", "glasslab"} <= set(record["packages"])
    assert {"commit", "dirty", "diff_sha256"} <= set(record["code"]) and record["host"]
    track.init(tmp_path, {"changed": True}, reason="resume").finish()
    assert track.read_record(tmp_path) == record


def test_vectors_samples_events_and_vocabulary(tmp_path):
    run = track.init(tmp_path, {})
    run.log_vector("moe/layer_0/expert_load", [0.25, 0.75], 3)
    run.sample(3, "def ", "<script>alert(1)</script>")
    run.annotate("spike_skipped", "loss 9.1 > mean + 6 sigma", "body", step=3, severity="warning")
    with pytest.raises(UserError, match="event kind 'explosion'"):
        run.annotate("explosion", "x")
    run.finish()
    with track.RunReader(tmp_path) as reader:
        assert reader.vectors("moe/layer_0/expert_load") == ([3], [[0.25, 0.75]])
        assert reader.samples()[0]["text"] == "<script>alert(1)</script>"
        assert [(e["kind"], e["severity"], e["step"]) for e in reader.events()] == [("spike_skipped", "warning", 3)]


def test_lab_event_log(tmp_path):
    track.log_lab_event(tmp_path, "step_started", "train-abcd1234", "started")
    track.log_lab_event(tmp_path, "step_failed", "train-abcd1234", "failed", "ValueError: x", "incident")
    events = track.read_lab_events(tmp_path)
    assert [(e["id"], e["kind"]) for e in events] == [(1, "step_started"), (2, "step_failed")]
    assert events[1]["body"] == "ValueError: x"


class BrokenSink(track.Sink):
    name = "broken"

    def log(self, metrics, step):
        raise RuntimeError("disk full")


def test_a_failing_sink_is_reported_once_and_dropped(tmp_path):
    run = track.init(tmp_path, {})
    run.sinks.append(BrokenSink())
    for step in range(3):
        run.log({"train/loss": 1.0}, step)
    run.finish()
    with track.RunReader(tmp_path) as reader:
        failures = [e for e in reader.events() if e["kind"] == "sink_failed"]
        assert len(failures) == 1 and "disk full" in failures[0]["body"]
        assert reader.scalars("train/loss")[0] == [0, 1, 2]


def read_tensorboard(run_dir: Path) -> dict[tuple[int, str], float]:
    from tensorboardX.proto import event_pb2

    values = {}
    for path in glob.glob(str(run_dir / "tensorboard" / "*")):
        data, pos = Path(path).read_bytes(), 0
        while pos < len(data):  # TFRecord: length, crc, payload, crc
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
            pos += 16 + length
            values.update({(event.step, v.tag): v.simple_value for v in event.summary.value})
    return values


def read_wandb_offline(run_dir: Path) -> dict[tuple[int, str], float]:
    from wandb.proto import wandb_internal_pb2

    (path,) = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "*.wandb"))
    data, pos, block, pending, values = Path(path).read_bytes(), 7, 32768, b"", {}
    while pos + 7 <= len(data):  # LevelDB log blocks: crc, length, type, payload
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record.FromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
                values.update({(items["_step"], k): v for k, v in items.items() if not k.startswith("_")})
    return values


def test_sinks_receive_the_same_values(tmp_path):
    sinks = ["jsonl"]
    for name, module in (("tensorboard", "tensorboardX"), ("wandb", "wandb")):
        try:
            __import__(module)
            sinks.append(name)
        except ImportError:
            pass
    run = track.init(tmp_path, {"lr": 1}, sinks=sinks)
    expected = {}
    for step in range(5):
        metrics = {"train/loss": 5.0 - step * 0.5, "optim/learning_rate": 0.001 * step}
        run.log(metrics, step)
        expected.update({(step, k): v for k, v in metrics.items()})
    run.finish()
    with track.RunReader(tmp_path) as reader:
        stored = {(s, k): v for k in reader.scalar_keys() for s, v in zip(*reader.scalars(k), strict=True)}
    assert stored == pytest.approx(expected)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    jsonl = {(r["step"], k): v for r in lines for k, v in r["metrics"].items()}
    assert jsonl == pytest.approx(expected)
    if "tensorboard" in sinks:
        assert read_tensorboard(tmp_path) == pytest.approx(expected)
    if "wandb" in sinks:
        assert read_wandb_offline(tmp_path) == pytest.approx(expected)
    assert not [e for e in track.RunReader(tmp_path).events() if e["kind"] == "sink_failed"]
