"""Data: sources → processing → BPE tokenizer → shards → mixture → resumable loader, and the report.

Import each name from its module (this package re-exports nothing, so the import linter sees every edge
and a data build never imports torch, which only the loader needs):

- ``build``: :func:`~glasslab.data.build.build_dataset` — ``glasslab data build`` (``build_step``, ``data_step``:
  the same as a lab step);
- ``config``: ``BuildConfig``, ``SourceConfig``, ``DataConfig``, ``MixtureConfig``, ``PhaseConfig`` …;
- ``loader`` (torch): ``Loader``, ``eval_batches``, ``eval_bytes_per_token`` — training and held-out data;
- ``shards``: ``manifest_hash``, ``read_manifest`` (domains, vocab size, counts); ``tokenizer``:
  ``load_tokenizer``; ``report``: ``make_report``; ``mixture``: ``plan_mixture``; ``usage``: ``dataset_usage``;
- ``provenance``: ``document_provenance`` and ``ProvenanceIndex`` — where a document of the shards came from;
- ``batches``: the batch of any training step, rebuilt and checked against the hash the run recorded.
"""
