"""One way to join Ray: the lab's steps and the data build's tasks both go through ``join_ray``, so a
wrong ``--address`` is the same one line and exit 2 for ``glasslab run`` and ``glasslab data build``."""

from __future__ import annotations

import inspect
import socket

import pytest

from cli_runner import run_cli
from glasslab.data import runner
from glasslab.lab import ray_join

pytest.importorskip("ray")

EXPERIMENT = '''
from glasslab.lab import Step


def quick(ctx):
    (ctx.output_dir / "done.txt").write_text("ok")


def steps():
    return [Step("a", quick, {})]
'''


def test_the_lab_and_the_data_build_join_ray_through_one_function():
    from glasslab.lab import ray_backend

    assert ray_backend.join_ray is ray_join.join_ray
    assert "join_ray(" in inspect.getsource(runner._join_ray)
    assert not hasattr(runner, "_check_reachable") and "ray.init" not in inspect.getsource(runner)


def test_an_unreachable_ray_address_is_one_line_and_exit_2_for_glasslab_run(tmp_path):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    exp = tmp_path / "exp.py"
    exp.write_text(EXPERIMENT)
    done = run_cli("run", str(exp), "--lab", str(tmp_path / "lab"), "--backend", "ray", "--address",
                   f"127.0.0.1:{port}", cwd=tmp_path, timeout=120)
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert f"--address 127.0.0.1:{port}: no Ray cluster reachable there" in errors[0]
    assert not list((tmp_path / "lab").rglob("done.txt")), "nothing ran"

