"""One attempt of one step: what the step process is given, and how it reports back.

The executor builds a :class:`WorkerSpec`; ``step_task.py`` hands it to ``python -m glasslab.lab.worker``
(pickled to a file) on the task pool and turns the process's result file and exit status into an
:class:`AttemptResult`.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path

from glasslab.lab.inputs import relocate_outputs
from glasslab.lab.step import FunctionRef, StepContext

MAX_RESULT_CHARS = 100_000
PARENT_PID_ENV = "GLASSLAB_PARENT_PID"
"""The pid a step process watches: when it dies, the step process stops (see worker.py)."""
RAY_ADDRESS_ENV = "GLASSLAB_RAY_ADDRESS"
"""Set for a step process run on Ray: the cluster's address, so a step that runs tasks of its own
(a data build) runs them on the same cluster."""


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a step process needs; pickled to a file (config pickled on its own, so the
    experiment file defining its class is loaded before it is unpickled)."""

    name: str
    step_hash: str
    ref: FunctionRef
    config_pickle: bytes
    output_dir: str
    inputs: dict[str, str]
    lab_root: str
    attempt: int
    workers: int
    re_register: bool = False
    force_registration: bool = False
    lab_url: str = ""
    """The lab root's URL when the lab is on object storage (``--lab s3://…``), else empty: the step then runs
    in the working copy of the node it lands on (``node_copy.py``)."""
    moved_from: str = ""
    """The working copy the executor named the paths in, when the step runs in another node's copy
    (``lab_root`` is then this node's): the config's resolved inputs are moved over when it is unpickled."""

    def context(self) -> StepContext:
        config = pickle.loads(self.config_pickle)
        if self.moved_from:
            config = relocate_outputs(config, Path(self.moved_from), Path(self.lab_root))
        return StepContext(
            name=self.name, output_dir=Path(self.output_dir), config=config,
            inputs={k: Path(v) for k, v in self.inputs.items()}, lab_root=Path(self.lab_root),
            attempt=self.attempt, step_hash=self.step_hash, re_register=self.re_register,
            force_registration=self.force_registration,
        )


@dataclass
class AttemptResult:
    """How one attempt ended: ``ok`` only when the step function returned."""

    ok: bool
    error: str | None
    host: str
    pid: int | None
    value: object = None
    """What the step function returned, when it was small, strict JSON (recorded in ``step.json``)."""
    lost: bool = False
    """The attempt ended without a word from it: the pool lost its worker (on Ray: the worker, or its node)."""


def one_line_error(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def small_json(value: object) -> object:
    """The function's return value when it is small, strict JSON (it goes into ``step.json``), else None."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return json.loads(text) if len(text) <= MAX_RESULT_CHARS else None
