"""The step lock: live holders are respected, dead or silent ones are taken over, losers find out."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from glasslab.lab.lock import LOCK_FILE, StepLock


def plant(folder, **fields) -> None:
    record = {"owner": "other", "host": socket.gethostname(), "pid": os.getpid(), "worker_pid": None,
              "acquired": time.time(), "heartbeat": time.time()} | fields
    (folder / LOCK_FILE).write_text(json.dumps(record))


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_live_holder_is_respected_and_release_is_owner_only(tmp_path):
    plant(tmp_path)  # this very process is alive, under another owner id
    mine = StepLock(tmp_path, "me", stale_after_s=60)
    assert not mine.try_acquire() and mine.holder()["owner"] == "other"
    mine.release()
    assert (tmp_path / LOCK_FILE).exists(), "release never drops another owner's lock"


def test_dead_holder_on_this_host_is_taken_over_at_once(tmp_path):
    plant(tmp_path, pid=dead_pid(), worker_pid=dead_pid())
    mine = StepLock(tmp_path, "me", stale_after_s=3600)
    assert mine.try_acquire() and mine.taken_over["owner"] == "other"
    assert mine.refresh(worker_pid=123)
    assert json.loads((tmp_path / LOCK_FILE).read_text())["worker_pid"] == 123
    mine.release()
    assert not (tmp_path / LOCK_FILE).exists()


def test_dead_executor_with_live_worker_is_waited_for(tmp_path):
    plant(tmp_path, pid=dead_pid(), worker_pid=os.getpid())
    assert not StepLock(tmp_path, "me", stale_after_s=3600).try_acquire()


def test_other_host_is_judged_by_heartbeat_and_the_loser_learns_it(tmp_path):
    plant(tmp_path, host="elsewhere", pid=1, heartbeat=time.time() - 5)
    assert not StepLock(tmp_path, "me", stale_after_s=30).try_acquire()
    plant(tmp_path, host="elsewhere", pid=1, heartbeat=time.time() - 31)
    loser = StepLock(tmp_path, "elsewhere-owner", stale_after_s=30)
    winner = StepLock(tmp_path, "me", stale_after_s=30)
    assert winner.try_acquire()
    assert not loser.refresh(), "a holder whose lock was taken over is told so on its next heartbeat"
