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
    traced; None for a run without samples."""
    if not samples:
        return None
    from glasslab.data.text_trace import TextTracer, build_command
    from glasslab.data.token_index import INDEX_FILE, TokenIndex, index_folder

    folder = lab.index().runs[run_id]
    dataset = (lab.json(folder / RUN_RECORD) or {}).get("dataset") or {}
    path = Path(str(dataset.get("path") or ""))
    digest = str(dataset.get("manifest_hash") or "")[:16]
    if not dataset.get("path") or not (path / MANIFEST_FILE).is_file():
        return {"status": "no_dataset", "message": f"the run's dataset {digest or '(not recorded)'} is not in the "
                "lab, so its samples are not traced to the training data"}
    index = lab.memo("trace-index-folder", str(path), [path / MANIFEST_FILE], lambda: index_folder(path, lab.root))
    if not (index / INDEX_FILE).is_file():
        return {"status": "no_index", "command": build_command(run_id, lab.root.resolve().name),
                "message": f"samples are not traced: dataset {digest} has no trace index yet"}
    stamps = [index / INDEX_FILE]
    try:
        tracer = lab.memo("tracer", str(index), stamps, lambda: TextTracer(path, TokenIndex(index)),
                          limit=TRACERS_KEPT)
        spans = {}
        for sample in samples:
            text = reply_text(str(sample.get("text") or ""))
            found = lab.memo("trace", (str(index), text), stamps, lambda text=text: tracer.trace(text)["spans"],
                             limit=TRACED_KEPT)
            if found:
                spans[str(sample["id"])] = found
    except (UserError, OSError, ValueError) as exc:  # an index or dataset being replaced: say so, draw the rest
        return {"status": "unreadable", "message": f"samples are not traced: {exc}"}
    return {"status": "traced", "index": index.name, "spans": spans}
