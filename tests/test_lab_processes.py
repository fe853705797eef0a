"""``glasslab run`` as real processes: SIGKILL and SIGTERM of the executor, two executors at once,
built-in experiments and bad input on the command line."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from cli_runner import run_cli, start_cli
from glasslab import track
from glasslab.lab import read_step_record
from glasslab.lab.lock import process_alive

EXPERIMENT = '''
import os, signal, time
from glasslab.lab import Step


def _log(ctx, what):
    with open(ctx.lab_root.parent / "calls.txt", "a") as f:
        f.write(f"{ctx.name} {what}\\n")


def quick(ctx):
    _log(ctx, "ran")
    time.sleep(ctx.config.get("sleep", 0))
    (ctx.output_dir / "done.txt").write_text("ok")


def slow_once(ctx):
    """Like the trainer: the first attempt saves a checkpoint and works for a long time; on SIGTERM it
    checkpoints again and *returns normally* (preempted). An attempt finding the checkpoint finishes."""
    _log(ctx, f"attempt{ctx.attempt}")
    checkpoint = ctx.output_dir / "checkpoint"
    if not checkpoint.exists():
        stop = []
        signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
        checkpoint.write_text(str(os.getpid()))
        deadline = time.time() + 120
        while not stop and time.time() < deadline:
            time.sleep(0.05)
        if stop:
            (ctx.output_dir / "got-sigterm").write_text(str(os.getpid()))
        return {"status": "preempted"}
    (ctx.output_dir / "done.txt").write_text("resumed")


def steps():
    a = Step("a", quick, {"sleep": SLEEP})
    b = Step("b", SLOW, {}, deps=(a,))
    c = Step("c", quick, {"sleep": SLEEP}, deps=(a,))
    return [a, b, c, Step("d", quick, {"sleep": SLEEP}, deps=(b, c))]
'''


def write_experiment(tmp_path: Path, slow: bool, sleep: float = 0.0) -> Path:
    path = tmp_path / "exp.py"
    path.write_text(EXPERIMENT.replace("SLOW", "slow_once" if slow else "quick").replace("SLEEP", str(sleep)))
    return path


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.txt"
    return sorted(path.read_text().splitlines()) if path.exists() else []


def folder(lab: Path, name: str) -> Path:
    (found,) = lab.glob(f"{name}-*")
    return found


def wait_for(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def started_b_and_c_done(lab: Path) -> bool:
    b = list(lab.glob("b-*/checkpoint"))
    c = [read_step_record(p) for p in lab.glob("c-*")]
    return bool(b) and bool(c) and c[0] is not None and c[0]["status"] == "succeeded"


def test_sigkill_of_executor_mid_step_then_rerun_completes(tmp_path):
    lab = tmp_path / "lab"
    exp = write_experiment(tmp_path, slow=True)
    executor = start_cli("run", str(exp), "--lab", str(lab), "--jobs", "2")
    wait_for(lambda: started_b_and_c_done(lab), what="step b to checkpoint and c to finish")
    executor.kill()
    executor.communicate()
    b = folder(lab, "b")
    assert read_step_record(b)["status"] == "running", "killed mid-step: nothing marked succeeded"
    assert read_step_record(folder(lab, "d"))["status"] == "pending"
    step_pid = int((b / "checkpoint").read_text())
    wait_for(lambda: not process_alive(step_pid), timeout=10, what="the orphaned step process to stop")
    assert (b / "got-sigterm").exists(), "the orphaned step got SIGTERM (time to checkpoint)"

    rerun = run_cli("run", str(exp), "--lab", str(lab))
    assert rerun.returncode == 0, rerun.stderr
    assert "took over" in rerun.stderr
    (lost,) = [e for e in track.read_lab_events(lab) if e["kind"] == "node_lost"]  # the dead executor, on the timeline
    assert lost["subject"] == b.name and lost["severity"] == "incident" and "last heartbeat" in lost["body"]
    assert calls(tmp_path) == ["a ran", "b attempt1", "b attempt2", "c ran", "d ran"]
    record = read_step_record(b)
    assert record["status"] == "succeeded" and record["attempts"] == 2
    assert [h["status"] for h in record["history"]] == ["failed", "succeeded"]
    assert (b / "done.txt").read_text() == "resumed"
    assert all(read_step_record(folder(lab, n))["status"] == "succeeded" for n in "abcd")


def test_sigterm_is_passed_on_to_running_steps(tmp_path):
    lab = tmp_path / "lab"
    exp = write_experiment(tmp_path, slow=True)
    executor = start_cli("run", str(exp), "--lab", str(lab), "--jobs", "2")
    wait_for(lambda: started_b_and_c_done(lab), what="step b to checkpoint and c to finish")
    executor.send_signal(signal.SIGTERM)
    _, stderr = executor.communicate(timeout=30)
    assert executor.returncode == 128 + signal.SIGTERM, stderr
    b = folder(lab, "b")
    assert (b / "got-sigterm").exists(), "the step saw SIGTERM and could checkpoint"
    record = read_step_record(b)
    assert record["status"] == "failed", "a step that returned after SIGTERM is not done"
    assert record["error"] == "interrupted by SIGTERM: returned after the signal" and record["result"] is None
    assert read_step_record(folder(lab, "d"))["status"] == "pending", "nothing new started"
    failed = [e for e in track.read_lab_events(lab) if e["kind"] == "step_failed"]
    assert [(e["subject"], e["severity"]) for e in failed] == [(b.name, "warning")]
    assert not (b / ".lock").exists(), "locks released"


def test_two_executors_started_together_run_each_step_once(tmp_path):
    lab = tmp_path / "lab"
    exp = write_experiment(tmp_path, slow=False, sleep=0.4)
    first = start_cli("run", str(exp), "--lab", str(lab), "--jobs", "2")
    second = start_cli("run", str(exp), "--lab", str(lab), "--jobs", "2")
    for proc in (first, second):
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
    assert calls(tmp_path) == ["a ran", "b ran", "c ran", "d ran"], "every step ran exactly once"
    starts = [e["subject"] for e in track.read_lab_events(lab) if e["kind"] == "step_started"]
    assert sorted(s.split("-")[0] for s in starts) == ["a", "b", "c", "d"]
    assert all(read_step_record(folder(lab, n))["attempts"] == 1 for n in "abcd")


def test_builtin_experiment_dry_run_then_run(tmp_path):
    lab = tmp_path / "lab"
    dry = run_cli("run", "hello", "--lab", str(lab), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "2 to run, 0 cached" in dry.stdout and not lab.exists()
    done = run_cli("run", "hello", "--lab", str(lab))
    assert done.returncode == 0, done.stderr
    assert (folder(lab, "shout") / "shout.txt").read_text() == "HELLO, LAB\n"
    env_lab = tmp_path / "env-lab"
    again = run_cli("run", "hello", "--dry-run", GLASSLAB_ROOT=str(env_lab))
    assert again.returncode == 0 and "2 to run" in again.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    cyclic = tmp_path / "cyclic.py"
    cyclic.write_text(
        "from glasslab.lab import Step\n"
        "def f(ctx):\n    pass\n"
        "def steps():\n    return [Step('x', f, {}, deps=('y',)), Step('y', f, {}, deps=('x',))]\n"
    )
    broken = tmp_path / "broken.py"
    broken.write_text("def steps(:\n")
    cases = {
        str(cyclic): "dependency cycle: x -> y -> x",
        str(broken): "broken.py:1:",
        str(tmp_path / "missing.py"): "experiment file not found",
        "no_such_builtin": "built-ins: demo, hello",
    }
    for target, message in cases.items():
        result = run_cli("run", target, "--lab", str(tmp_path / "lab"))
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "lab").exists()
    result = run_cli("run", "hello", "--lab", str(tmp_path / "lab"), "--force", "nope")
    assert result.returncode == 2 and "--force nope: no step of that name" in result.stderr
