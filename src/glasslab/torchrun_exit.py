"""How a process ends: a torchrun rank skips the interpreter's teardown.

Once FSDP2 has run, the gloo process group outlives ``destroy_process_group``: its worker threads are
still up afterwards (three more threads than a job without FSDP2 leaves), held from C++, and the
interpreter's teardown races them. One CI run saw a rank of a 2-rank CPU FSDP2 job abort that way
("terminate called without an active exception", SIGABRT; not reproduced in 40 runs here). A rank has
flushed and closed everything by the time its command returns, so it leaves with ``os._exit`` and no
teardown; any other process exits normally.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def exit_process(code: int) -> NoReturn:
    """End the process with ``code``: ``os._exit`` after flushing under torchrun, else ``sys.exit``."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
