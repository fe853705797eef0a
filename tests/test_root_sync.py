"""The trainer's push to an object-store root runs beside training: a checkpoint returns at once, checkpoints
made during a push go together in the next, the run's end waits for the last one, a file removed while it
was being sent makes the push start over (for as long as checkpoints made meanwhile explain it), and a push the
store refused fails the run at its end."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from glasslab.errors import UserError
from glasslab.store.url import MissingObject
from glasslab.train.root_sync import MAX_RESTARTS, RootSync


class SlowMirror:
    """Each push takes ``seconds`` and records when it started; ``errors`` are raised by the first pushes."""

    def __init__(self, seconds: float, errors: list[BaseException] | None = None, during=None) -> None:
        self.seconds, self.errors, self.pushes, self.during = seconds, list(errors or []), [], during
        self.first_started = threading.Event()

    def push(self, folder):
        self.pushes.append(folder)
        self.first_started.set()
        time.sleep(self.seconds)
        if self.during is not None:
            self.during()
        if self.errors:
            raise self.errors.pop(0)


def _trainer(tmp_path):
    return SimpleNamespace(ctx=SimpleNamespace(is_main=True), run_dir=str(tmp_path))


def test_a_checkpoint_returns_while_its_push_runs_and_the_end_waits_for_the_last(tmp_path):
    mirror = SlowMirror(0.3)
    sync, trainer = RootSync(mirror), _trainer(tmp_path)
    started = time.monotonic()
    sync.on_checkpoint(trainer, tmp_path / "step-1")
    assert time.monotonic() - started < 0.1  # training goes on
    mirror.first_started.wait(5)
    sync.on_checkpoint(trainer, tmp_path / "step-2")  # during the first push
    sync.on_checkpoint(trainer, tmp_path / "step-3")  # both go in one more push
    sync.on_end(trainer, "finished")
    assert len(mirror.pushes) == 2 and not sync._thread.is_alive()


def test_a_file_removed_mid_push_starts_it_over_and_a_refused_push_fails_the_run_at_its_end(tmp_path):
    mirror = SlowMirror(0.0, [MissingObject("gone"), UserError("s3://lab: cannot write the lab: denied")])
    sync, trainer = RootSync(mirror), _trainer(tmp_path)
    sync.on_checkpoint(trainer, tmp_path / "step-1")
    with pytest.raises(UserError, match="denied"):
        sync.on_end(trainer, "finished")
    assert len(mirror.pushes) == 2  # started over once, then refused

    failing = RootSync(SlowMirror(0.0, [UserError("denied")]))
    failing.on_checkpoint(trainer, tmp_path / "step-1")
    failing.on_end(trainer, "failed")  # the run's own error is the one raised, not this


def test_a_file_that_keeps_vanishing_is_a_failure_not_a_loop(tmp_path):
    mirror = SlowMirror(0.0, [MissingObject("gone")] * (MAX_RESTARTS + 1))
    sync, trainer = RootSync(mirror), _trainer(tmp_path)
    sync.on_checkpoint(trainer, tmp_path / "step-1")
    with pytest.raises(MissingObject):
        sync.on_end(trainer, "preempted")
    assert len(mirror.pushes) == MAX_RESTARTS + 1


def test_a_push_that_keeps_losing_files_to_the_checkpoints_made_meanwhile_is_no_fault(tmp_path):
    """A slow store and frequent checkpoints: each push is still sending a checkpoint when the next one's
    retention removes it (this failed a 60-step run with 20 ms per request before the count was reset)."""
    trainer = _trainer(tmp_path)
    mirror = SlowMirror(0.0, [MissingObject("gone")] * (MAX_RESTARTS + 3))
    sync = RootSync(mirror)
    mirror.during = lambda: sync.on_checkpoint(trainer, tmp_path / "later") if mirror.errors else None
    sync.on_checkpoint(trainer, tmp_path / "step-1")
    sync.on_end(trainer, "finished")
    assert len(mirror.pushes) == MAX_RESTARTS + 4  # every loss started over; the last push went through
