"""One task pool, one way to join Ray: the lab's steps and the data build's tasks both run on ``lab/pool.py``
(inline, local processes or Ray), so a wrong ``--address`` is the same one line and exit 2 for ``glasslab run``
and ``glasslab data build``."""

from __future__ import annotations

import importlib.util
import inspect
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
import yaml

from cli_runner import run_cli
from data_helpers import small_build_config
from glasslab.config import to_dict
from glasslab.data import runner
from glasslab.data.progress import Progress
from glasslab.errors import UserError
from glasslab.lab import Executor, Step, read_step_record
from glasslab.lab.pool import ProcessPool, open_pool

EXPERIMENT = '''
from glasslab.lab import Step


def quick(ctx):
    (ctx.output_dir / "done.txt").write_text("ok")


def steps():
    return [Step("a", quick, {})]
'''


def pid_of_call(ctx) -> dict:
    return {"pid": os.getpid()}


def task_pid(arg: int, folder: Path) -> dict:
    return {"pid": os.getpid(), "arg": arg}


def test_the_lab_and_the_data_build_run_on_one_pool(tmp_path, monkeypatch):
    calls: list[str] = []
    submit = ProcessPool.submit

    def counted(self, fn, *args, **kwargs):
        calls.append(fn.__name__)
        return submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(ProcessPool, "submit", counted)
    report = Executor(tmp_path / "lab", echo=False).run([Step("p", pid_of_call, {})])
    assert report.ok and calls == ["run_step_process"]
    step_pid = read_step_record(report.plan.steps[0].folder)["result"]["pid"]
    tasks = runner.TaskRunner(tmp_path / "work", 2, "local", Progress(None, enabled=False))
    try:
        done = tasks.run("s", [runner.Task(f"{i:04d}", task_pid, i) for i in range(3)])
    finally:
        tasks.close()
    assert calls == ["run_step_process"] + ["execute"] * 3, "both run their work as calls on the one pool"
    assert sorted(r["arg"] for r in done.values()) == [0, 1, 2]
    assert os.getpid() not in {step_pid} | {r["pid"] for r in done.values()}, "each call ran in a pool process"
    for old in ("glasslab.lab.local_backend", "glasslab.lab.ray_backend", "glasslab.lab.inline_backend"):
        assert importlib.util.find_spec(old) is None, f"{old} is a second mechanism beside the pool"
    source = inspect.getsource(runner)
    assert "ProcessPoolExecutor" not in source and "ray.init" not in source and "import ray" not in source


def fails(why: str) -> None:
    raise ValueError(why)


def dies() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def sleeps(seconds: float) -> None:
    time.sleep(seconds)


def _outcome(pool: ProcessPool, handle):
    while not pool.wait([handle], 5.0):
        pass
    return pool.poll(handle)


def test_the_local_pool_reuses_its_workers_and_says_how_each_call_ended():
    pool = ProcessPool(1)
    first = _outcome(pool, pool.submit(os.getpid))
    assert first.ok and first.value != os.getpid() and first.value == first.pid
    assert _outcome(pool, pool.submit(os.getpid)).value == first.value, "the worker is reused"
    failed = _outcome(pool, pool.submit(fails, "bad input"))
    assert isinstance(failed.error, ValueError) and str(failed.error) == "bad input" and failed.lost is None
    lost = _outcome(pool, pool.submit(dies))
    assert lost.lost == "a worker process died" and lost.error is None
    fresh = _outcome(pool, pool.submit(os.getpid))
    assert fresh.ok and fresh.value != first.value, "a dead worker is replaced"
    started = time.monotonic()
    stopped = pool.submit(sleeps, 60)
    time.sleep(0.3)
    pool.terminate(stopped)  # the call sees KeyboardInterrupt, as a step's call passes SIGTERM on
    assert isinstance(_outcome(pool, stopped).error, KeyboardInterrupt) and time.monotonic() - started < 10
    last = _outcome(pool, pool.submit(os.getpid)).value
    pool.close()
    with pytest.raises(ProcessLookupError):  # closing ends the workers
        os.kill(last, 0)


def test_ray_not_installed_is_one_user_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an interpreter without Ray gives
    monkeypatch.delitem(sys.modules, "glasslab.lab.pool_ray", raising=False)
    with pytest.raises(UserError, match=r"--backend ray: Ray is not installed .*pip install 'glasslab\[ray\]'"):
        open_pool("ray", 2)


@pytest.mark.parametrize("command", ["run", "data build"])
def test_an_unreachable_ray_address_is_one_line_and_exit_2(command, tmp_path):
    pytest.importorskip("ray")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    if command == "run":
        (tmp_path / "exp.py").write_text(EXPERIMENT)
        args = ["run", "exp.py", "--lab", "lab"]
    else:
        (tmp_path / "build.yaml").write_text(yaml.safe_dump(to_dict(small_build_config(tmp_path))))
        args = ["data", "build", "build.yaml", "--out", "ds"]
    done = run_cli(*args, "--backend", "ray", "--address", f"127.0.0.1:{port}", cwd=tmp_path, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"--address 127.0.0.1:{port}: no Ray cluster reachable there" in lines[0]
    assert not list(tmp_path.rglob("done.txt")) and not (tmp_path / "ds").exists(), "nothing ran"
