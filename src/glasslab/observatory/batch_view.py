"""The run page's batch panel, live and published: which batch an event points to, which batches a
published site carries, and a rebuilt batch as the panel's JSON.

The live server rebuilds any step's batch on demand (``batch_api.py``); a static site has no server, so
the publisher rebuilds a fixed set ahead (:func:`published_batches`) and writes each as the same JSON
(:func:`panel_json`), cut to a size a page can carry. Both pages find an event's batch from the
``batch`` field :func:`with_batches` puts on each event, so a click means the same on either.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from glasslab.data.batches import StepBatch

# The first step of an attempt that begins after a resume or a fork is the one after the event's step
# (the checkpoint's); the guard's events name the step whose batch it judged.
NEXT_STEP_KINDS = frozenset({"resume", "fork"})
INCIDENT_SEVERITIES = ("warning", "incident")
EVENLY_SPACED = 10
"""Besides step 1 and every incident's step, this many steps evenly spaced over the planned run."""
MAX_EVENT_BATCHES = 100
"""At most this many events' batches per run (a guard that skipped thousands of steps)."""
PUBLISHED_TEXT_CHARS = 1000
"""Characters of each document piece a published batch keeps (``glasslab batch`` prints them all)."""
PUBLISHED_ROWS = 64
"""Rows of a published batch (a real run's global batch holds thousands; the first are rank 0's)."""


def event_batch(event: dict[str, Any]) -> dict[str, Any] | None:
    """``{step, attempt}`` of the batch an event of the run store points to (``attempt`` None: the
    attempt in force at the step), or None for an event at no step.

    A resume or a fork points to the first step its attempt trained; the guard's events (a step skipped,
    a rollback, a non-finite loss: warnings and incidents) to the batch of the attempt they happened in,
    which a later attempt may have replaced; any other event to the step's batch in force."""
    step = event.get("step")
    if not isinstance(step, int):
        return None
    attempt = event.get("attempt")
    if event.get("kind") in NEXT_STEP_KINDS:
        return {"step": step + 1, "attempt": attempt}
    if event.get("severity") in INCIDENT_SEVERITIES and isinstance(attempt, int):
        return {"step": step, "attempt": attempt}
    return {"step": step, "attempt": None}


def with_batches(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run store's events, each with its ``batch`` (:func:`event_batch`)."""
    return [{**event, "batch": event_batch(event)} for event in events]


def published_batches(trained: Iterable[tuple[int, int]], events: list[dict[str, Any]],
                      planned_steps: int | None) -> list[tuple[int, int]]:
    """The ``(step, attempt)`` batches a published run page carries, in step order: step 1, ``EVENLY_SPACED``
    steps over the planned run (the last trained step when none was planned) in the attempt in force, and
    the batch of every warning and incident (a spike skipped, a rollback, a non-finite loss, an eval out
    of the predicted band…), resume and fork (at most ``MAX_EVENT_BATCHES``). ``trained``:
    the run's recorded ``(step, attempt)`` pairs; a batch it does not hold (a step not trained yet) is left
    out. The fixed steps depend on the plan, not on progress, so a run published while it trains keeps the
    batches already written."""
    trained = set(trained)
    in_force: dict[int, int] = {}
    for step, attempt in trained:
        in_force[step] = max(attempt, in_force.get(step, attempt))
    if not in_force:
        return []
    span = planned_steps or max(in_force)
    fixed = {1, *(max(1, round(span * k / EVENLY_SPACED)) for k in range(1, EVENLY_SPACED + 1))}
    chosen = {(step, in_force[step]) for step in fixed if step in in_force}
    targets = [event_batch(e) for e in events
               if e.get("severity") in INCIDENT_SEVERITIES or e.get("kind") in NEXT_STEP_KINDS]
    for target in [t for t in targets if t][:MAX_EVENT_BATCHES]:
        step, attempt = target["step"], target["attempt"]
        pair = (step, attempt if attempt is not None else in_force.get(step))
        if pair in trained:
            chosen.add(pair)
    return sorted(chosen)


def panel_json(batch: StepBatch, text_chars: int | None = None, max_rows: int | None = None) -> dict[str, Any]:
    """A rebuilt batch as the panel draws it (``StepBatch.to_json``); a published one keeps its first
    ``max_rows`` rows (``rows_left_out`` counts the rest) and ``text_chars`` characters of each piece
    (``text_cut``: the characters left out)."""
    out = batch.to_json()
    out["rows_left_out"] = 0
    if max_rows is not None and len(out["rows"]) > max_rows:
        out["rows_left_out"] = len(out["rows"]) - max_rows
        out["rows"] = out["rows"][:max_rows]
    out["text_chars"] = text_chars
    for row in out["rows"]:
        for piece in row["pieces"]:
            cut = len(piece["text"]) - text_chars if text_chars is not None else 0
            piece["text_cut"] = max(0, cut)
            if cut > 0:
                piece["text"] = piece["text"][:text_chars]
    return out
