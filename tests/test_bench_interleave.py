"""bench/interleave.py's quiet-machine check: the bench's own processes do not count, anyone else's do."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from interleave import LoadWatch  # noqa: E402

BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"


def watched(burn) -> str:
    """What a LoadWatch (0.2 s samples, 1 s windows) prints around ``burn()``."""
    out = []
    watch = LoadWatch(every_s=0.2, window_s=1.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("builtins.print", lambda *a, **k: out.append(" ".join(map(str, a))))
        with watch:
            burn()
    return "".join(out)


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc (Linux)")
def test_the_benchs_own_workers_are_not_load_but_a_stranger_is():
    # Two workers the bench started, a core each: the load average would say 2, the check says quiet.
    def own() -> None:
        workers = [subprocess.Popen([sys.executable, "-c", BURN.format(s=2.0)]) for _ in range(2)]
        for worker in workers:
            worker.wait()
    assert watched(own) == ""
    # A process outside the bench's tree (started detached: its parent exits at once) is another's load.
    def stranger() -> None:
        subprocess.run(["setsid", "-f", sys.executable, "-c", BURN.format(s=2.5)], check=True)
        time.sleep(2.5)
    assert "machine not quiet" in watched(stranger)
