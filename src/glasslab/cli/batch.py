"""``glasslab batch RUN STEP``: the documents in a training step's batch, rebuilt and checked."""

from __future__ import annotations

import argparse
import json

from glasslab.cli.options import add_lab_option


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "batch", help="show the documents in a training step's batch",
        description="Rebuild the batch a run trained on at STEP by replaying its loader's draws (for the "
        "attempt in force at that step: after a rollback or a resume the latest), check it against the "
        "hash the trainer recorded, and print each row's documents: domain, source, the window's place in "
        "the document, and the decoded text with document boundaries marked. RUN is a run id (its folder "
        "name under the lab) or a path to the run folder.",
    )
    p.add_argument("run", metavar="RUN", help="run id or run folder")
    p.add_argument("step", type=int, metavar="STEP", help="the training step (the first is 1)")
    p.add_argument("--attempt", type=int, default=None, metavar="A",
                   help="the batch as attempt A drew it (default: the attempt in force at STEP)")
    p.add_argument("--rank", type=int, default=None, metavar="R",
                   help="only the rows data-parallel rank R trained on (default: the whole global batch)")
    p.add_argument("--json", action="store_true", help="print the batch as JSON")
    add_lab_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from glasslab.cli.note import resolve_run_dir
    from glasslab.data.batches import rebuild_batch

    batch = rebuild_batch(resolve_run_dir(args.lab, args.run), args.step, args.attempt, args.rank)
    if args.json:
        print(json.dumps(batch.to_json(), indent=1))
    else:
        print(render(batch))
    return 0 if batch.matches else 1


def render(batch) -> str:
    """The batch as text: a header with the check, then each row's documents."""
    check = ("matches the hash recorded in training" if batch.matches
             else f"DOES NOT MATCH the recorded {batch.recorded_hash}")
    lines = [f"{batch.run} step {batch.step} (attempt {batch.attempt}, {batch.reason}): {len(batch.rows)} rows of "
             f"{batch.seq_len + 1} tokens, {batch.world_size} rank(s); tokens hash {batch.hash} {check}"]
    for row in batch.rows:
        lines.append(f"\n=== row {row.index} (rank {row.rank}) · {row.domain} ===")
        for piece in row.pieces:
            lines.append(f"--- document {piece.document} · tokens {piece.offset}..{piece.offset + piece.tokens} "
                         f"of {piece.document_tokens} · {describe_source(piece.source)}")
            lines.append(piece.text)
            if piece.ends_document:
                lines.append("<<< end of document >>>")
    return "\n".join(lines)


def describe_source(source: dict | None) -> str:
    """``source-name: file line 12`` and the like, from a provenance record."""
    if source is None:
        return "source not recorded (dataset built without provenance)"
    where = [f"{key} {source[key]}" for key in ("file", "line", "row", "module", "dataset", "record") if key in source]
    return f"{source['source']}: " + " ".join(where)
