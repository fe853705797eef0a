"""Data: sources → processing → BPE tokenizer → shards → mixture → resumable loader, and the report.

Public API (see the module of each for details):

- :class:`BuildConfig` and :func:`build_dataset` — ``glasslab data build`` (:func:`build_step` is
  the same as a lab step function);
- :class:`DataConfig`, :class:`MixtureConfig`, :class:`PhaseConfig` and :class:`Loader` — training data;
- :func:`eval_batches`, :func:`eval_bytes_per_token` — held-out evaluation;
- :func:`load_tokenizer`, :func:`manifest_hash`, :func:`read_manifest` (domains, vocab size,
  counts), :func:`make_report`, :func:`plan_mixture`;
- :func:`document_provenance` and :class:`ProvenanceIndex` — where a document of the shards came from.

Names are imported on first use, so building a dataset never pays for importing torch (the loader's).
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "build_dataset": "build",
    "build_step": "build",
    "data_step": "build",
    "BuildConfig": "config",
    "DataConfig": "config",
    "DedupConfig": "config",
    "EvalSplitConfig": "config",
    "FilterConfig": "config",
    "MixtureConfig": "config",
    "PhaseConfig": "config",
    "SourceConfig": "config",
    "TokenizerConfig": "config",
    "load_build_config": "config",
    "DataExhausted": "loader",
    "Loader": "loader",
    "eval_batches": "loader",
    "eval_bytes_per_token": "loader",
    "plan_mixture": "mixture",
    "make_report": "report",
    "dataset_usage": "usage",
    "manifest_hash": "shards",
    "read_manifest": "shards",
    "load_tokenizer": "tokenizer",
    "document_provenance": "provenance",
    "ProvenanceIndex": "provenance",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'glasslab.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"glasslab.data.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
