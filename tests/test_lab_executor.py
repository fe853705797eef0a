"""The executor on the local backend: real step subprocesses, real folders, real event log."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from glasslab import track
from glasslab.config import UNVERSIONED
from glasslab.lab import Executor, RetryPolicy, Step, read_step_record


@dataclasses.dataclass(frozen=True)
class MulConfig:
    """Multiply the inputs' sum by ``factor``."""

    factor: int = 2
    num_workers: int = dataclasses.field(default=1, metadata=UNVERSIONED)


def calls_file(ctx):
    return ctx.lab_root.parent / "calls.txt"


def record_call(ctx) -> None:
    with open(calls_file(ctx), "a") as f:
        f.write(f"{ctx.name} {ctx.attempt}\n")


def combine(ctx) -> None:
    """value = (1 + sum of the dependencies' values) * factor."""
    record_call(ctx)
    total = 1 + sum(json.loads((p / "value.json").read_text())["value"] for p in ctx.inputs.values())
    factor = ctx.config.factor if isinstance(ctx.config, MulConfig) else ctx.config.get("factor", 1)
    (ctx.output_dir / "value.json").write_text(json.dumps({"value": total * factor}))
    return {"value": total * factor}


def fail_until_marker(ctx) -> None:
    """Fails (leaving a partial file, as a crashed trainer leaves checkpoints) until a marker exists."""
    record_call(ctx)
    (ctx.output_dir / f"partial-{ctx.attempt}.txt").write_text("checkpoint")
    if not (ctx.lab_root.parent / "let-it-pass").exists():
        raise ValueError(f"boom on attempt {ctx.attempt}")
    (ctx.output_dir / "value.json").write_text(json.dumps({"value": 100}))


def threads_given(ctx) -> dict:
    return {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}


def calls(tmp_path) -> list[str]:
    path = tmp_path / "calls.txt"
    return sorted(line.split()[0] for line in path.read_text().splitlines()) if path.exists() else []


def diamond(factor: int = 2, num_workers: int = 1) -> list[Step]:
    a = Step("a", combine, config={"factor": 1})
    b = Step("b", combine, config=MulConfig(factor, num_workers), deps=(a,))
    c = Step("c", combine, config={"factor": 3}, deps=(a,))
    d = Step("d", combine, config={"factor": 1}, deps=(b, c))
    return [a, b, c, d]


def values(report) -> dict[str, int]:
    return {n.name: json.loads((n.folder / "value.json").read_text())["value"] for n in report.plan.steps}


def test_diamond_runs_once_then_is_cached_and_versioned_changes_rerun_downstream(tmp_path):
    lab = tmp_path / "lab"
    report = Executor(lab, jobs=2, echo=False).run(diamond())
    assert report.ok and calls(tmp_path) == ["a", "b", "c", "d"], "each step ran exactly once"
    assert values(report) == {"a": 1, "b": 4, "c": 6, "d": 11}
    for node in report.plan.steps:
        record = read_step_record(node.folder)
        assert record["status"] == "succeeded" and record["attempts"] == 1 and record["hash"] == node.hash
        assert record["result"] == json.loads((node.folder / "value.json").read_text())
        assert record["dependencies"] == {name: dep.key for name, dep in node.deps.items()}
        assert record["code_version"]["commit"] and record["pid"] == os.getpid()
        assert record["timings"]["finished"] >= record["timings"]["started"] > 0
    events = track.read_lab_events(lab)
    assert sorted(e["kind"] for e in events) == ["step_started"] * 4 + ["step_succeeded"] * 4
    assert {e["subject"] for e in events} == {n.key for n in report.plan.steps}

    again = Executor(lab, echo=False).run(diamond())
    assert again.ok and again.executed == [] and calls(tmp_path) == ["a", "b", "c", "d"], "rerun ran nothing"

    unversioned = Executor(lab, echo=False).run(diamond(num_workers=8))
    assert unversioned.executed == [], "an unversioned field does not change identity"

    changed = Executor(lab, jobs=2, echo=False).run(diamond(factor=5))
    ran = sorted(k.split("-")[0] for k in changed.executed)
    assert ran == ["b", "d"], "only the changed step and its dependent reran"
    assert values(changed) == {"a": 1, "b": 10, "c": 6, "d": 17}
    assert calls(tmp_path) == ["a", "b", "b", "c", "d", "d"]


def test_failure_is_recorded_dependents_skip_and_rerun_resumes_in_same_folder(tmp_path):
    lab = tmp_path / "lab"
    flaky = Step("flaky", fail_until_marker, config={})
    after = Step("after", combine, config={}, deps=(flaky,))
    report = Executor(lab, echo=False).run([flaky, after])
    assert not report.ok
    flaky_key = report.plan.steps[0].key
    assert report.outcomes[flaky_key].status == "failed"
    assert report.outcomes[report.plan.steps[1].key].status == "skipped"
    record = read_step_record(lab / flaky_key)
    assert record["status"] == "failed" and record["error"] == "ValueError: boom on attempt 1"
    assert "Traceback" in (lab / flaky_key / "step.log").read_text()
    assert (lab / flaky_key / "partial-1.txt").exists(), "a failed step keeps its folder"
    failed = [e for e in track.read_lab_events(lab) if e["kind"] == "step_failed"]
    assert len(failed) == 1 and failed[0]["severity"] == "incident" and "boom" in failed[0]["body"]

    (tmp_path / "let-it-pass").touch()
    rerun = Executor(lab, echo=False).run([flaky, after])
    assert rerun.ok and sorted(k.split("-")[0] for k in rerun.executed) == ["after", "flaky"]
    record = read_step_record(lab / flaky_key)
    assert record["status"] == "succeeded" and record["attempts"] == 2
    assert [h["status"] for h in record["history"]] == ["failed", "succeeded"]
    assert (lab / flaky_key / "partial-1.txt").exists() and (lab / flaky_key / "partial-2.txt").exists()


def test_retries_are_events_and_force_reruns_from_scratch(tmp_path):
    lab = tmp_path / "lab"
    step = Step("flaky", fail_until_marker, config={}, retry=RetryPolicy(count=2, backoff_s=0.05))
    executor = Executor(lab, echo=False)  # one executor, reused for every run below
    report = executor.run([step])
    key = report.plan.steps[0].key
    assert report.outcomes[key].status == "failed" and report.outcomes[key].attempts == 3
    kinds = [e["kind"] for e in track.read_lab_events(lab)]
    assert kinds.count("step_retried") == 2 and kinds.count("step_started") == 3
    assert kinds[-1] == "step_failed"
    assert calls(tmp_path) == ["flaky"] * 3

    (tmp_path / "let-it-pass").touch()
    assert executor.run([step]).ok
    assert executor.run([step]).executed == []
    forced = executor.run([step], force=["flaky"])
    assert forced.executed == [key]
    partials = sorted(p.name for p in (lab / key).glob("partial-*"))
    assert partials == ["partial-5.txt"], "forced: the folder was emptied first"


def test_bad_jobs_and_backend_are_user_errors(tmp_path):
    from glasslab.errors import UserError

    with pytest.raises(UserError, match="--jobs 0"):
        Executor(tmp_path, jobs=0)
    with pytest.raises(UserError, match="--backend 'slurm'"):
        Executor(tmp_path, backend="slurm")


def test_a_step_process_gets_the_threads_its_step_asks_for(tmp_path, monkeypatch):
    from glasslab.lab import Resources

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    steps = [Step("one", threads_given, {}), Step("two", threads_given, {}, resources=Resources(cpus=2))]
    report = Executor(tmp_path / "lab", jobs=2).run(steps)
    assert {n.name: read_step_record(n.folder)["result"] for n in report.plan.steps} == {
        "one": {"OMP_NUM_THREADS": "1"}, "two": {"OMP_NUM_THREADS": "2"}}
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # what the user exported wins
    report = Executor(tmp_path / "lab2", jobs=2).run(steps)
    assert all(read_step_record(n.folder)["result"] == {"OMP_NUM_THREADS": "3"} for n in report.plan.steps)
