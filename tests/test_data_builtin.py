"""Built-in corpora from glasslab's own dependencies: deterministic, versioned in the manifest, and a
missing one fails in one line."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys

import pytest

from glasslab.config import ConfigError, from_dict
from glasslab.data import builtin
from glasslab.data.build import build_dataset
from glasslab.data.config import BuildConfig, EvalSplitConfig, SourceConfig, TokenizerConfig
from glasslab.data.sources import InputErrors, read_source
from glasslab.errors import UserError


def _read(source: SourceConfig) -> list[str]:
    return list(read_source(source, InputErrors()))


def test_package_corpora_are_deterministic_disjoint_and_versioned():
    code = _read(SourceConfig(domain="code", kind="builtin", path="numpy_code", max_documents=4))
    assert code == _read(SourceConfig(domain="code", kind="builtin", path="numpy_code", max_documents=4))
    assert len(code) == 4 and all("import" in t or "def " in t for t in code)
    prose = _read(SourceConfig(domain="prose", kind="builtin", path="numpy_prose", max_bytes=100_000))
    assert all(len(t) >= builtin.MIN_PROSE_CHARS for t in prose)
    # Code and prose come from disjoint halves of the module list: no prose text inside a code document.
    every_code = "".join(builtin.documents("numpy_code"))
    assert not any(t.split("\n\n")[0] in every_code for t in prose if len(t.split("\n\n")[0]) > 80)
    modules = [relative for relative, _ in builtin.package_modules("numpy_code")]
    assert modules == sorted(modules) and not any("/tests/" in m for m in modules)
    entry = builtin.describe("numpy_prose")
    assert entry["package"] == "numpy" and entry["version"] == importlib.metadata.version("numpy")
    assert "BSD" in entry["licence"] and entry["version"] in entry["provenance"]
    # Every dependency listed is installed with glasslab, so every corpus name resolves here.
    for name in builtin.corpus_names():
        assert builtin.describe(name)["licence"] not in ("", "unknown"), name
        # Where Python lives is not part of the dataset: the same build elsewhere has the same manifest hash.
        assert "/" not in builtin.describe(name)["provenance"], name


def test_corpus_names_are_validated_and_a_missing_corpus_fails_in_one_line(monkeypatch):
    assert from_dict(SourceConfig, {"kind": "builtin", "path": "torch_code"}).path == "torch_code"
    with pytest.raises(ConfigError, match="source.path='pandas_code'"):
        from_dict(SourceConfig, {"kind": "builtin", "path": "pandas_code"})
    monkeypatch.setitem(builtin.PACKAGES, "ghost", "glasslab-ghost-package")
    with pytest.raises(UserError, match="ghost_code: package glasslab-ghost-package is not installed"):
        _read(SourceConfig(domain="x", kind="builtin", path="ghost_code"))
    # Some distributions ship pydoc_data separately: a missing module is a one-line error, not a traceback.
    monkeypatch.setitem(sys.modules, "pydoc_data.topics", None)
    with pytest.raises(UserError, match="pydoc_topics: this Python has no pydoc_data"):
        _read(SourceConfig(domain="x", kind="builtin", path="pydoc_topics"))


def test_manifest_records_each_source_with_package_version_and_licence(tmp_path):
    cfg = BuildConfig(
        sources=(SourceConfig(domain="prose", kind="builtin", path="rich_prose", max_bytes=120_000),
                 SourceConfig(domain="ref", kind="builtin", path="pydoc_topics", max_documents=40)),
        eval=EvalSplitConfig(fraction=0.1, min_bytes=5_000),
        tokenizer=TokenizerConfig(vocab_size=400), num_workers=1,
    )
    dataset = build_dataset(cfg, tmp_path / "ds", progress=False)
    manifest = json.loads((dataset / "manifest.json").read_text())
    by_path = {s["path"]: s for s in manifest["sources"]}
    assert by_path["rich_prose"]["package"] == "rich"
    assert by_path["rich_prose"]["version"] == importlib.metadata.version("rich")
    assert by_path["rich_prose"]["licence"] == "MIT"
    assert by_path["pydoc_topics"]["package"] == "python" and by_path["pydoc_topics"]["licence"] == "PSF-2.0"
    # Each document's provenance names its module (or reference topic), which holds its text.
    from glasslab.data.normalize import normalize
    from glasslab.data.provenance import ProvenanceIndex
    from glasslab.data.shards import open_shard
    from glasslab.data.tokenizer import load_tokenizer

    index, tokenizer = ProvenanceIndex(dataset), load_tokenizer(dataset)
    topics = {u.name: builtin.unit_document("pydoc_topics", u) for u in builtin.units("pydoc_topics")}
    for i in range(3):
        where = index.record("ref", "train", i)
        assert where["source"] == "ref:pydoc_topics" and where["module"].startswith("pydoc_data.topics:")
        text = tokenizer.decode(open_shard(dataset, "ref", "train").document(i)[:-1].tolist())
        assert text == normalize(topics[where["module"]])
        module = index.record("prose", "train", i)["module"]
        assert module.startswith("rich") and importlib.util.find_spec(module) is not None


def test_machine_generated_modules_are_left_out():
    """Codec tables and other generated modules are not language; a tiny rung rolled back on one."""
    root = builtin.stdlib_dir()
    assert builtin._generated((root / "encodings" / "cp437.py").read_text())
    assert builtin._generated((root / "pydoc_data" / "topics.py").read_text()[:2000])
    assert not builtin._generated((root / "encodings" / "utf_8.py").read_text())
    assert not builtin._generated((root / "ast.py").read_text())  # "can be generated by passing …" is prose
    heads = [doc[:builtin.GENERATED_HEAD_CHARS] for doc in builtin.documents("stdlib_code")]
    assert heads and not any("gencodec.py" in head or "Autogenerated by Sphinx" in head for head in heads)
