"""Small real corpora and builds shared by the data tests (text from Python's own reference topics)."""

from __future__ import annotations

import json
from pathlib import Path

from glasslab.data.build import build_dataset
from glasslab.data.builtin import documents
from glasslab.data.config import BuildConfig, DedupConfig, EvalSplitConfig, SourceConfig, TokenizerConfig


def topic_texts() -> list[str]:
    return list(documents("pydoc_topics"))


def write_jsonl(path: Path, texts: list[str], field: str = "text") -> Path:
    path.write_text("".join(json.dumps({field: t, "id": i}) + "\n" for i, t in enumerate(texts)))
    return path


def small_build_config(tmp_path: Path, **kwargs) -> BuildConfig:
    """Two domains of ~200 KB real text each (alternate reference topics), vocab 512."""
    texts = topic_texts()
    alpha = write_jsonl(tmp_path / "alpha.jsonl", texts[0::2])
    beta = write_jsonl(tmp_path / "beta.jsonl", texts[1::2])
    defaults = dict(
        sources=(
            SourceConfig(domain="alpha", kind="jsonl", path=str(alpha)),
            SourceConfig(domain="beta", kind="jsonl", path=str(beta)),
        ),
        dedup=DedupConfig(),
        eval=EvalSplitConfig(fraction=0.1, min_documents=2),
        tokenizer=TokenizerConfig(vocab_size=512),
        num_workers=1,
    )
    defaults.update(kwargs)
    return BuildConfig(**defaults)


def build_small(tmp_path: Path, name: str = "ds", **kwargs) -> Path:
    return build_dataset(small_build_config(tmp_path, **kwargs), tmp_path / name, progress=False)
