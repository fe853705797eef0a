"""A command as a one-step experiment: the step runs in the command's process with the executor's
record, lock and events; a rerun finds it; a failure is recorded, then raised as it was."""

from __future__ import annotations

import json
import os

import pytest

from glasslab.errors import UserError
from glasslab.lab import Executor, RetryPolicy, Step, read_step_record, run_one_step
from glasslab.track import read_lab_events


def write_value(ctx) -> dict:
    """Writes the config's value; returns where it ran (the pid shows it ran in this process)."""
    (ctx.output_dir / "value.json").write_text(json.dumps(ctx.config))
    return {"pid": os.getpid(), "attempt": ctx.attempt}


def refuse(ctx) -> None:
    (ctx.output_dir / "partial.txt").write_text("half")
    raise UserError(f"value={ctx.config['value']}: expected something else")


def fail_first_attempt(ctx) -> int:
    if ctx.attempt == 1:
        raise RuntimeError("the machine went away")
    return ctx.attempt


def test_a_command_step_runs_here_then_is_cached(tmp_path):
    lab = tmp_path / "lab"
    step = Step("make", write_value, {"value": 1})
    done = run_one_step(step, lab)
    assert done.status == "succeeded" and done.value == {"pid": os.getpid(), "attempt": 1}
    assert done.folder == lab / f"make-{done.hash[:8]}" and (done.folder / "value.json").is_file()
    record = read_step_record(done.folder)
    assert record["status"] == "succeeded" and record["result"] == done.value and not (done.folder / ".lock").exists()
    again = run_one_step(Step("make", write_value, {"value": 1}), lab)
    assert (again.status, again.folder, again.value) == ("cached", done.folder, done.value)
    forced = run_one_step(Step("make", write_value, {"value": 1}), lab, force=True)
    assert forced.status == "succeeded" and read_step_record(done.folder)["attempts"] == 2
    kinds = [(e["kind"], e["subject"]) for e in read_lab_events(lab)]
    assert kinds == [("step_started", done.folder.name), ("step_succeeded", done.folder.name)] * 2


def test_a_failure_is_recorded_then_raised_as_it_was(tmp_path):
    lab = tmp_path / "lab"
    with pytest.raises(UserError, match="value=3: expected something else"):
        run_one_step(Step("refuse", refuse, {"value": 3}), lab)
    (folder,) = lab.glob("refuse-*")
    record = read_step_record(folder)
    assert record["status"] == "failed" and "value=3" in record["error"] and (folder / "partial.txt").is_file()
    assert [e["kind"] for e in read_lab_events(lab)] == ["step_started", "step_failed"]


def test_a_pinned_folder_holding_another_step_is_never_taken_for_its_result(tmp_path):
    lab, pinned = tmp_path / "lab", tmp_path / "mine"
    first = run_one_step(Step("make", write_value, {"value": 1}, folder=pinned), lab)
    assert first.folder == pinned and read_step_record(pinned)["folder"] == "mine"
    other = run_one_step(Step("make", write_value, {"value": 2}, folder=pinned), lab)
    assert other.status == "succeeded" and json.loads((pinned / "value.json").read_text()) == {"value": 2}
    assert read_step_record(pinned)["hash"] == other.hash != first.hash


def test_retries_from_the_executor_override_the_steps_own_count(tmp_path):
    step = Step("flaky", fail_first_attempt, retry=RetryPolicy(count=0, backoff_s=0.0))
    report = Executor(tmp_path / "lab", echo=False, retries=1).run([step])
    assert report.ok
    (node,) = report.plan.steps
    record = read_step_record(node.folder)
    assert record["attempts"] == 2 and record["result"] == 2 and record["retry"]["count"] == 1
    assert [e["kind"] for e in read_lab_events(tmp_path / "lab")] == [
        "step_started", "step_retried", "step_started", "step_succeeded"]
