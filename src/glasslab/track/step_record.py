"""A run's record by step at full resolution: each step's ``train/loss`` and the hash of its input tokens.

The charts' series are thinned; this is not. The static site publishes it beside each run page, and
``glasslab reproduce`` holds a replay against it (``reproduce/replay.py``). Not to be confused with a
step folder's ``step.json`` (``lab/status.py``).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from glasslab.track.reader import RunReader

TRAIN_LOSS_KEY = "train/loss"
PUBLISHED_HASH_CHARS = 16
"""Hex digits of each step's batch hash on the site: 64 bits tell two batches apart."""


def step_record(reader: RunReader) -> dict[str, Any]:
    """Every step's ``train/loss`` as logged and the hash of its input tokens, the attempt in force each, at
    full resolution (the charts' series are thinned): what ``glasslab reproduce`` holds a replay against.
    ``{"loss": {"steps", "values"}, "batch": {"steps", "hashes"}}``; a store from before batch hashes were
    recorded has none."""
    steps, values = reader.scalars(TRAIN_LOSS_KEY)
    in_force: dict[int, str] = {}
    try:
        for step, _attempt, digest in reader.batch_hashes():  # each step's latest attempt last
            in_force[step] = digest[:PUBLISHED_HASH_CHARS]
    except sqlite3.Error:  # no batches table
        pass
    return {"loss": {"steps": steps, "values": values},
            "batch": {"steps": list(in_force), "hashes": list(in_force.values())}}


def by_step(record: dict[str, Any]) -> tuple[dict[int, float], dict[int, str]]:
    """A step record's losses and batch hashes, each by step."""
    loss, batch = record["loss"], record["batch"]
    return (dict(zip(loss["steps"], loss["values"], strict=True)),
            dict(zip(batch["steps"], batch["hashes"], strict=True)))
