"""A run's samples traced to the training documents they copy, for the run page (and an SFT run's replies).

Tracing needs the suffix-array index of the run's dataset (``<lab>/index-<hash8>``), which ``glasslab trace
RUN`` builds; the trainer does not trace (its samples would wait on an index it may not have) and the
observatory writes nothing. So a page traces its samples when the index is there, and otherwise says which
command builds it. Spans are kept per (index, text): a page drawn again, or a new sample beside old ones,
traces only what it has not traced. The static site gets them with the page's data (the publisher writes
the same dict), so a published page shows the same highlights with no index beside it.

What is traced is a sample's generated text: the text itself, or for a post-training sample (a conversation
in JSON) the last turn's content; the spans' character offsets point into that string, as the page draws it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from glasslab.errors import UserError
from glasslab.layout import MANIFEST_FILE, RUN_RECORD
from glasslab.observatory.lab_scan import Lab

TRACED_KEPT = 4096  # (index, text) traces kept: a few pages of 200 samples
TRACERS_KEPT = 4  # opened indexes (tokenizer, provenance, memory maps) kept


def reply_text(sample_text: str) -> str:
    """The generated text of a sample: a conversation's last turn, or the text itself."""
    if sample_text.startswith("["):
        try:
            turns = json.loads(sample_text)
        except ValueError:
            return sample_text
        if isinstance(turns, list) and turns and all(isinstance(t, dict) and "role" in t for t in turns):
            return str(turns[-1].get("content") or "")
    return sample_text


def sample_traces(lab: Lab, run_id: str, samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``{"status": "traced", "index", "spans": {sample id: [span, …]}}`` (samples with no span left out; a
    span as :meth:`TextTracer.trace <glasslab.data.text_trace.TextTracer.trace>` gives it), or
    ``{"status": "no_index" | "no_dataset" | "unreadable", "message", "command"?}`` saying why nothing is
    traced; None for a run without samples or without a recorded dataset."""
    if not samples:
        return None
    from glasslab.data.text_trace import build_command

    folder = lab.index().runs[run_id]
    dataset = (lab.json(folder / RUN_RECORD) or {}).get("dataset")
    if not isinstance(dataset, dict) or not dataset.get("path"):
        return None  # a run that records no dataset (made by hand, or before datasets were recorded)
    from glasslab.data.batches import trained_dataset

    digest = str(dataset.get("manifest_hash") or "")[:16]
    try:  # where it was recorded, or beside the run in a lab moved whole
        path = trained_dataset(folder)
    except UserError:
        return {"status": "no_dataset", "message": f"samples are not traced: the run's dataset {digest} "
                f"({dataset.get('folder') or Path(str(dataset['path'])).name}) is gone or holds other data"}
    spans = {}
    try:
        for sample in samples:
            found = traced_spans(lab, path, reply_text(str(sample.get("text") or "")))
            if found is None:
                return {"status": "no_index", "command": build_command(run_id, lab.root.resolve().name),
                        "message": f"samples are not traced: dataset {digest} has no trace index yet"}
            if found:
                spans[str(sample["id"])] = found
    except (UserError, OSError, ValueError) as exc:  # an index or dataset being replaced: say so, draw the rest
        return {"status": "unreadable", "message": f"samples are not traced: {exc}"}
    return {"status": "traced", "index": _index_folder(lab, path).name, "spans": spans}


def traced_spans(lab: Lab, dataset: Path, text: str) -> list[dict[str, Any]] | None:
    """The spans of ``text`` found in the training data of ``dataset`` (a built dataset's folder), kept per
    (index, text); None when the lab holds no index of it."""
    from glasslab.data.text_trace import TextTracer
    from glasslab.data.token_index import INDEX_FILE, TokenIndex

    index = _index_folder(lab, dataset)
    if not (index / INDEX_FILE).is_file():
        return None
    stamps = [index / INDEX_FILE]
    tracer = lab.memo("tracer", str(index), stamps, lambda: TextTracer(dataset, TokenIndex(index)), limit=TRACERS_KEPT)
    return lab.memo("trace", (str(index), text), stamps, lambda: tracer.trace(text)["spans"], limit=TRACED_KEPT)


def _index_folder(lab: Lab, dataset: Path) -> Path:
    """Where the lab keeps (or would keep) the index of ``dataset``: the index step's planned folder."""
    from glasslab.data.token_index import index_folder

    return lab.memo("trace-index-folder", str(dataset), [dataset / MANIFEST_FILE],
                    lambda: index_folder(dataset, lab.root))
