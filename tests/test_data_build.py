"""End-to-end builds on small real text: shards, provenance, manifest, report, bad input, the CLI; the build as
tasks: the same dataset whatever the workers, the backend, the cut into tasks or a kill, and resuming."""

from __future__ import annotations

import json
import platform

import numpy as np
import pytest
import yaml

from cli_runner import run_cli
from data_helpers import build_small, small_build_config, topic_texts
from glasslab.data.build import WORK_PREFIX, build_dataset
from glasslab.data.normalize import normalize
from glasslab.data.provenance import document_provenance
from glasslab.data.shards import manifest_hash, open_shard
from glasslab.data.tokenizer import load_tokenizer
from glasslab.errors import UserError
from glasslab.layout import file_sha256


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("build")
    return tmp, build_small(tmp, num_workers=2)


def test_shards_hold_the_documents_and_the_manifest_checks_out(built):
    tmp, ds = built
    manifest = json.loads((ds / "manifest.json").read_text())
    assert manifest["python_version"] == platform.python_version() and manifest["dtype"] == "uint16"
    assert manifest["format"] == "glasslab-dataset/2" and not list(ds.glob(f"{WORK_PREFIX}*"))
    assert file_sha256(ds / "tokenizer" / "tokenizer.json") == manifest["tokenizer"]["sha256"]
    tokenizer = load_tokenizer(ds)
    inputs = {normalize(t) for t in topic_texts()}
    for domain in ("alpha", "beta"):
        texts = {}
        for split in ("train", "eval"):
            entry = manifest["domains"][domain][split]
            assert file_sha256(ds / entry["file"]) == entry["sha256"]
            shard = open_shard(ds, domain, split)
            assert shard.num_tokens == entry["tokens"] and len(shard.ends) == entry["documents"] > 0
            assert np.all(shard.tokens[shard.ends - 1] == manifest["eot_id"])  # every document ends in EOT
            texts[split] = [
                tokenizer.decode(shard.document(i)[:-1].tolist(), skip_special_tokens=False)
                for i in range(len(shard.ends))
            ]
            assert set(texts[split]) <= inputs
            assert sum(len(t.encode()) for t in texts[split]) == entry["bytes"]
            # Provenance: each document's file and line hold the text it was made from, in file order.
            assert file_sha256(ds / entry["provenance"]) == entry["provenance_sha256"]
            lines = []
            for i, text in enumerate(texts[split]):
                where = document_provenance(ds, domain, split, i)
                assert where["source"] == f"{domain}:{tmp / domain}.jsonl" and where["file"] == f"{domain}.jsonl"
                record = json.loads((tmp / f"{domain}.jsonl").read_text().splitlines()[where["line"] - 1])
                assert normalize(record["text"]) == text
                lines.append(where["line"])
            assert lines == sorted(lines) and len(set(lines)) == len(lines)
        assert not set(texts["train"]) & set(texts["eval"])
    assert manifest["provenance"]["bytes_per_document"] == 12
    with pytest.raises(UserError, match="no document 10000"):
        document_provenance(ds, "alpha", "train", 10_000)


def test_report_has_the_agreed_layout(built):
    _, ds = built
    report = json.loads((ds / "report.json").read_text())
    assert report["manifest_hash"] == manifest_hash(ds)
    assert [s["domain"] for s in report["sources"]] == ["alpha", "beta"]
    assert {"name", "domain", "kind", "path", "provenance", "licence"} <= set(report["sources"][0])
    stages = [f["stage"] for f in report["funnel"]]
    assert stages[:2] == ["raw", "normalized"] and stages[-4:] == [
        "exact_dedup",
        "near_dedup",
        "decontaminate",
        "tokens",
    ]
    assert sorted(stages[2:-4]) == sorted(f"filter:{n}" for n in report["filters"])
    documents = [f["documents"] for f in report["funnel"]]
    assert documents == sorted(documents, reverse=True) and documents[0] == len(topic_texts())
    assert documents[1] - documents[-5] == sum(report["filters"].values())
    assert report["funnel"][-1]["tokens"] == sum(
        d["tokens"] + d["eval_tokens"] for d in report["domains"].values()
    )
    for d in report["domains"].values():
        assert 2.0 < d["bytes_per_token"] < 6.0
        assert sum(d["length_histogram"]["counts"]) == d["documents"] and len(d["samples"]) == 3
        assert d["eval_documents"] >= 2
    assert report["errors"] == {"malformed_lines": [], "malformed_count": 0, "malformed_reasons": {},
                                "invalid_utf8": 0, "invalid_utf8_documents": [], "skipped_files": [],
                                "empty_files": []}
    # The same funnel per domain (the data page draws it): stages in order, summing to the totals.
    per_domain = report["funnel_by_domain"]
    assert sorted(per_domain) == ["alpha", "beta"]
    for i, total in enumerate(report["funnel"]):
        rows = [per_domain[d][i] for d in per_domain]
        assert {r["stage"] for r in rows} == {total["stage"]}
        for field in ("documents", "bytes", "tokens") if total["stage"] == "tokens" else ("documents", "bytes"):
            assert sum(r[field] for r in rows) == total[field], (total["stage"], field)
    assert per_domain["alpha"][-1]["tokens"] == report["domains"]["alpha"]["tokens"] + report["domains"]["alpha"][
        "eval_tokens"]


def test_rebuild_serial_in_another_process_gives_the_same_manifest_and_failed_build_keeps_the_old(
    built, tmp_path
):
    from glasslab.config import to_dict

    tmp, ds = built
    (tmp_path / "same.yaml").write_text(yaml.safe_dump(to_dict(small_build_config(tmp))))
    done = run_cli("data", "build", "same.yaml", "--workers", "1", "--out", "again", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    again = tmp_path / "again"
    assert manifest_hash(again) == manifest_hash(ds)  # 1 vs 2 workers, another process and hash seed
    before = manifest_hash(again)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"content": "no text field"}\n')
    cfg = small_build_config(
        tmp,
        sources=small_build_config(tmp).sources
        + (small_build_config(tmp).sources[0].__class__(domain="gamma", kind="jsonl", path=str(bad)),),
    )
    with pytest.raises(UserError, match="no text field 'text' \\(keys: content\\)"):
        build_dataset(cfg, again, progress=False)
    assert manifest_hash(again) == before and not list(again.glob(f"{WORK_PREFIX}*"))


def test_cli_build_demo_corpora_report_and_bad_input(tmp_path):
    config = {
        "sources": [
            {
                "domain": "code",
                "kind": "builtin",
                "path": "stdlib_code",
                "max_documents": 12,
            },
            {"domain": "prose", "kind": "builtin", "path": "stdlib_prose", "max_documents": 20},
            {"domain": "reference", "kind": "builtin", "path": "pydoc_topics", "max_documents": 25},
        ],
        "tokenizer": {"vocab_size": 400},
    }
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(config))
    done = run_cli("data", "build", "demo.yaml", "eval.min_documents=1", "--out", "ds", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert sorted(manifest["domains"]) == ["code", "prose", "reference"]
    assert manifest["config"]["eval"]["min_documents"] == 1 and manifest["vocab_size"] == 400
    report = json.loads((tmp_path / "ds" / "report.json").read_text())
    assert report["sources"][0]["licence"] == "PSF-2.0" and "CPython" in report["sources"][0]["provenance"]

    (tmp_path / "mix.yaml").write_text(
        yaml.safe_dump(
            {
                "weights": {"code": 1, "prose": 1},
                "phases": [{"start_step": 10, "weights": {"reference": 1}}],
                "epoch_caps": {"reference": 1.0},
            }
        )
    )
    done = run_cli(
        "data",
        "report",
        "ds",
        "--mixture",
        "mix.yaml",
        "--token-budget",
        "100000",
        "--tokens-per-step",
        "1000",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads((tmp_path / "ds" / "report.json").read_text())["mixture"]
    assert [p["start_step"] for p in plan["phases"]] == [0, 10]
    assert plan["phases"][0]["tokens"]["code"] == pytest.approx(5000, abs=1)
    assert plan["total"]["epochs"]["reference"] == pytest.approx(1.0)  # capped at one epoch

    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"text": broken\n')
    (tmp_path / "bad.yaml").write_text(
        yaml.safe_dump(
            {"sources": [{"domain": "x", "kind": "jsonl", "path": "bad.jsonl"}], "filters": {"prose": {"min_words": 1}}}
        )
    )
    done = run_cli("data", "build", "bad.yaml", "--strict", "--out", "bad_ds", "--quiet", cwd=tmp_path)
    assert done.returncode == 2 and "bad.jsonl:2: malformed JSON" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "bad_ds").exists()
    (tmp_path / "mix_bad.yaml").write_text(yaml.safe_dump({"weights": {"code": 1, "poetry": 1}}))
    done = run_cli("data", "report", "ds", "--mixture", "mix_bad.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "unknown domain 'poetry'" in done.stderr


def test_build_with_every_document_filtered_fails_with_one_line(tmp_path):
    from data_helpers import write_jsonl
    from glasslab.data.config import BuildConfig, SourceConfig

    path = write_jsonl(tmp_path / "short.jsonl", ["too short", "also far too short"])
    cfg = BuildConfig(sources=(SourceConfig(domain="x", kind="jsonl", path=str(path)),), num_workers=1)
    with pytest.raises(UserError, match="no documents left after processing \\(filter drops: length 2\\)"):
        build_dataset(cfg, tmp_path / "ds", progress=False)
    assert not (tmp_path / "ds").exists()  # the build made the folder, and a failed build leaves nothing


def test_shards_hold_exactly_the_plain_encoding_of_each_document(built):
    _, ds = built
    tokenizer = load_tokenizer(ds)
    eot = tokenizer.token_to_id("<|endoftext|>")
    shard = open_shard(ds, "beta", "train")
    for i in range(len(shard.ends)):
        ids = shard.document(i).tolist()
        assert ids[-1] == eot and eot not in ids[:-1]
        text = tokenizer.decode(ids[:-1], skip_special_tokens=False)
        assert tokenizer.encode(text).ids == ids[:-1]


def test_build_step_takes_a_lab_context(tmp_path):
    from types import SimpleNamespace

    from glasslab.config import to_dict
    from glasslab.data.build import build_step

    ctx = SimpleNamespace(config=to_dict(small_build_config(tmp_path)), output_dir=tmp_path / "step-1234abcd")
    ctx.output_dir.mkdir()
    (ctx.output_dir / "step.json").write_text("{}")  # the executor's own file stays untouched
    assert build_step(ctx) == ctx.output_dir
    assert (ctx.output_dir / "manifest.json").is_file() and (ctx.output_dir / "step.json").read_text() == "{}"
