"""``glasslab trace RUN|DATASET "text"``: the spans of a text found verbatim in the training data, and where."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from glasslab.cli.options import add_lab_option
from glasslab.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace", help="find the spans of a text that the training data holds verbatim",
        description="Tokenize TEXT with the dataset's tokenizer and print its maximal spans of at least "
        "--min-tokens tokens found verbatim in the dataset's training shards, each with how often it occurs "
        "and its first source documents (domain, source, file and line or module). Spans made of common "
        "tokens (unigram probability above --max-prob) are dropped and counted. Spans the held-out split holds "
        "(text the model was not trained on) are printed after them, with their held-out documents. The "
        "suffix-array index is a lab step of its own, <lab>/index-<hash8>, built the first time a dataset is "
        "traced. Without TEXT it only builds the index (the run page's samples and glasslab chat --trace use "
        "it). RUN is a run id or run folder (its dataset is traced); DATASET is a built dataset's folder.",
    )
    p.add_argument("target", metavar="RUN|DATASET", help="run id, run folder or dataset folder")
    p.add_argument("text", nargs="?", help="the text to trace (without it: build the index and say where it is)")
    p.add_argument("--min-tokens", type=int, default=8, metavar="K", help="shortest span reported (default 8)")
    p.add_argument("--max-docs", type=int, default=3, metavar="N",
                   help="source documents listed per span (default 3)")
    p.add_argument("--max-prob", type=float, default=None, metavar="P",
                   help="drop spans whose unigram probability (product over their tokens) is above P "
                   "(default: that of K typical tokens of the training data)")
    p.add_argument("--json", action="store_true", help="print the spans as JSON")
    add_lab_option(p)
    p.set_defaults(func=run)


def dataset_of(lab: str, target: str) -> Path:
    """The dataset folder ``target`` names: a dataset folder, or a run (id or folder) whose dataset it is."""
    from glasslab.data.batches import trained_dataset
    from glasslab.layout import MANIFEST_FILE, METRICS_DB

    if (Path(target) / MANIFEST_FILE).is_file():
        return Path(target)
    for candidate in (Path(lab) / target, Path(target)):
        if (candidate / METRICS_DB).is_file():
            return trained_dataset(candidate)
    raise UserError(f"{target!r}: neither a built dataset (no {MANIFEST_FILE}) nor a run (no run store at "
                    f"{Path(lab) / target} or {target})")


def run(args: argparse.Namespace) -> int:
    from glasslab.data.text_trace import TextTracer
    from glasslab.data.token_index import index_for

    if args.text is not None and not args.text.strip():
        raise UserError("the text to trace is empty")
    if args.max_prob is not None and not 0 < args.max_prob <= 1:
        raise UserError(f"--max-prob {args.max_prob}: expected a probability in (0, 1]")
    if args.min_tokens < 1 or args.max_docs < 0:
        raise UserError(f"--min-tokens {args.min_tokens} / --max-docs {args.max_docs}: expected >= 1 / >= 0")
    dataset = dataset_of(args.lab, args.target)
    index = index_for(dataset, args.lab)
    if args.text is None:
        print(f"trace index of dataset {index.info['manifest_hash'][:16]} ({index.info['tokens']:,} tokens): "
              f"{index.folder}")
        return 0
    traced = TextTracer(dataset, index).trace(
        args.text, args.min_tokens, args.max_docs, None if args.max_prob is None else math.log10(args.max_prob),
        heldout=True)
    if args.json:
        print(json.dumps({"dataset": str(dataset), "manifest_hash": index.info["manifest_hash"],
                          "index": str(index.folder), **traced}, indent=1))
        return 0
    print_traced(traced, index.info)
    return 0


def print_traced(traced: dict, info: dict) -> None:
    """The spans of a traced text, each with its count and source documents, as ``glasslab trace`` prints them:
    those in the training data, then those in the held-out split (text the model was not trained on)."""
    dropped, cutoff = traced["dropped_common"], traced["max_log10_unigram_prob"]
    heldout = traced.get("heldout_spans") or []
    whole = any(span["start"] == 0 and span["end"] == traced["tokens"] for span in heldout)
    print(f"{traced['tokens']} tokens; {len(traced['spans'])} span(s) of >= {traced['min_tokens']} tokens found in "
          f"the training data of {info['manifest_hash'][:16]} ({info['tokens']:,} tokens)"
          + (f"; {dropped} more dropped as common (unigram probability > 1e{cutoff:.1f})" if dropped else ""))
    if heldout:
        print(("the whole text is" if whole else f"{len(heldout)} span(s) are") + " in the held-out split "
              f"({info['heldout_tokens']:,} tokens), which the model was not trained on: see below")
    for span in traced["spans"]:
        also = f" · also {span['heldout_count']}x in the held-out split" if span["heldout_count"] else ""
        _print_span(span, "", also)
    for span in heldout:
        _print_span(span, " in the held-out split", "")


def _print_span(span: dict, where: str, also: str) -> None:
    from glasslab.cli.batch import describe_source

    print(f"\n=== tokens {span['start']}..{span['end']} · {span['count']} occurrence(s){where} · "
          f"unigram probability 1e{span['log10_unigram_prob']:.0f}{also} ===")
    print(span["text"])
    kind = "held-out document" if where else "document"
    for document in span["documents"]:
        print(f"  <- {document['domain']} {kind} {document['document']} · {describe_source(document['source'])}")
