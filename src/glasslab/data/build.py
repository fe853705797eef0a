"""Build orchestration: sources → normalise → filter → dedup → eval split → decontaminate → BPE → shards.

Text streams through the stages one document at a time and is staged on disk as JSONL between the
passes that need a whole domain first (choosing the eval split, collecting eval n-grams before
checking training documents). Everything is written to ``<out>/.build-tmp`` and moved into place at
the end; ``manifest.json`` is moved last and is what readers look for, so a build that dies midway
leaves nothing a later step would trust.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from glasslab.config import config_hash, from_dict, to_dict
from glasslab.data import report, sources
from glasslab.data.config import BuildConfig
from glasslab.data.decontaminate import Decontaminator, choose_eval, split_key
from glasslab.data.dedup import ExactDedup, NearDedup
from glasslab.data.filters import FILTER_NAMES, first_failed_filter
from glasslab.data.normalize import normalize
from glasslab.data.shards import SPLITS, ShardWriter, index_path, token_dtype
from glasslab.data.tokenizer import EOT, TOKENIZER_DIR, save_tokenizer, train_tokenizer
from glasslab.errors import UserError
from glasslab.layout import (
    BUILD_RECORD,
    MANIFEST_FILE,
    REPORT_FILE,
    file_sha256,
    move_into_place,
    remove,
    write_json_atomic,
)

TMP_DIR = ".build-tmp"


class Funnel:
    """Documents and UTF-8 bytes left after each stage, in stage order, in all and per domain."""

    def __init__(self) -> None:
        self.stages: dict[str, list[int]] = {}
        self.domains: dict[str, dict[str, list[int]]] = {}

    def count(self, stage: str, text: str, domain: str) -> None:
        size = len(text.encode("utf-8"))
        in_domain = self.domains.setdefault(domain, {})
        for entry in (self.stages.setdefault(stage, [0, 0]), in_domain.setdefault(stage, [0, 0])):
            entry[0] += 1
            entry[1] += size

    def ensure(self, stage: str) -> None:
        self.stages.setdefault(stage, [0, 0])

    def to_list(self) -> list[dict]:
        return [{"stage": s, "documents": d, "bytes": b} for s, (d, b) in self.stages.items()]

    def by_domain(self) -> dict[str, list[dict]]:
        """The funnel of each domain, every stage listed (zeros where a domain lost everything)."""
        return {domain: [{"stage": s, "documents": counts.get(s, [0, 0])[0], "bytes": counts.get(s, [0, 0])[1]}
                         for s in self.stages] for domain, counts in sorted(self.domains.items())}


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"[data build] {message}", file=sys.stderr, flush=True)


def _warn(message: str) -> None:
    """Said even without progress lines: what the build left out or changed is never silent."""
    print(f"[data build] warning: {message}", file=sys.stderr, flush=True)


def read_staged(path: Path) -> Iterator[str]:
    """Texts of a staging file (one JSON string per line)."""
    if not path.is_file():
        return
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            yield json.loads(line)


def _process_sources(
    cfg: BuildConfig,
    stage_dir: Path,
    funnel: Funnel,
    errors: sources.InputErrors,
    filter_drops: dict[str, int],
) -> dict[str, list[tuple[int, int]]]:
    """Pass 1: read, normalise, filter and dedup every source into ``stage/<domain>.jsonl``.

    Returns each domain's (eval-split key, UTF-8 bytes) per document, in staged order.
    """
    exact = ExactDedup() if cfg.dedup.exact else None
    near = NearDedup(cfg.dedup) if cfg.dedup.near else None
    keys: dict[str, list[tuple[int, int]]] = {}
    handles: dict[str, object] = {}
    for stage in ["raw", "normalized", *(f"filter:{n}" for n in FILTER_NAMES), "exact_dedup", "near_dedup"]:
        funnel.ensure(stage)
    try:
        for source in cfg.sources:
            for raw in sources.read_source(source, errors, cfg.strict, cfg.skip_bad_files):
                funnel.count("raw", raw, source.domain)
                text = normalize(raw)
                if not text:
                    continue
                funnel.count("normalized", text, source.domain)
                failed = first_failed_filter(text, cfg.filters, source.skip_filters)
                for name in FILTER_NAMES[: FILTER_NAMES.index(failed) if failed else len(FILTER_NAMES)]:
                    funnel.count(f"filter:{name}", text, source.domain)
                if failed:
                    filter_drops[failed] += 1
                    continue
                if exact is not None and not exact.is_new(text):
                    continue
                funnel.count("exact_dedup", text, source.domain)
                if near is not None and not near.is_new(text):
                    continue
                funnel.count("near_dedup", text, source.domain)
                if source.domain not in handles:
                    handles[source.domain] = open(stage_dir / f"{source.domain}.jsonl", "w", encoding="utf-8")
                handles[source.domain].write(json.dumps(text) + "\n")
                size = len(text.encode("utf-8"))
                keys.setdefault(source.domain, []).append((split_key(text, cfg.seed), size))
    finally:
        for handle in handles.values():
            handle.close()
    return keys


def _split_and_decontaminate(
    cfg: BuildConfig, stage_dir: Path, keys: dict[str, list[tuple[int, int]]], funnel: Funnel
) -> None:
    """Pass 2: hold out eval documents per domain, then drop training documents sharing their n-grams."""
    decontaminator = Decontaminator(cfg.eval.ngram_words)
    masks = {}
    for domain, pairs in keys.items():
        keys_and_sizes = np.array(pairs, dtype=np.int64)
        masks[domain] = choose_eval(keys_and_sizes[:, 0], keys_and_sizes[:, 1], cfg.eval)
    for domain, mask in masks.items():
        with open(stage_dir / f"{domain}.eval.jsonl", "w", encoding="utf-8") as out:
            for text, is_eval in zip(read_staged(stage_dir / f"{domain}.jsonl"), mask, strict=True):
                if is_eval:
                    decontaminator.add_eval(text)
                    out.write(json.dumps(text) + "\n")
                    funnel.count("decontaminate", text, domain)
    funnel.ensure("decontaminate")
    for domain, mask in masks.items():
        with open(stage_dir / f"{domain}.train.jsonl", "w", encoding="utf-8") as out:
            for text, is_eval in zip(read_staged(stage_dir / f"{domain}.jsonl"), mask, strict=True):
                if not is_eval and decontaminator.is_clean(text):
                    out.write(json.dumps(text) + "\n")
                    funnel.count("decontaminate", text, domain)
        (stage_dir / f"{domain}.jsonl").unlink()


def _tokenizer_sample(cfg: BuildConfig, stage_dir: Path, domains: list[str]) -> Iterator[str]:
    """The first ``sample_bytes / len(domains)`` bytes of each domain's training text."""
    per_domain = cfg.tokenizer.sample_bytes // len(domains)
    for domain in domains:
        taken = 0
        for text in read_staged(stage_dir / f"{domain}.train.jsonl"):
            if taken >= per_domain:
                break
            taken += len(text.encode("utf-8"))
            yield text


def _write_shards(
    cfg: BuildConfig,
    tmp: Path,
    stage_dir: Path,
    domains: list[str],
    tokenizer_json: str,
    eot_id: int,
    vocab_size: int,
) -> dict:
    entries: dict[str, dict] = {}
    with ShardWriter(tokenizer_json, eot_id, vocab_size, cfg.num_workers) as writer:
        for domain in domains:
            entries[domain] = {}
            for split in SPLITS:
                bin_path = tmp / "shards" / domain / f"{split}.bin"
                stats = writer.write(read_staged(stage_dir / f"{domain}.{split}.jsonl"), bin_path)
                entries[domain][split] = {
                    "file": bin_path.relative_to(tmp).as_posix(),
                    "index": index_path(bin_path).relative_to(tmp).as_posix(),
                    "documents": stats.documents,
                    "tokens": stats.tokens,
                    "bytes": stats.bytes,
                    "sha256": file_sha256(bin_path),
                    "index_sha256": file_sha256(index_path(bin_path)),
                }
    return entries


def _write_json(path: Path, data: dict) -> None:
    write_json_atomic(path, data, sort_keys=True)


def _move_into_place(tmp: Path, out_dir: Path) -> None:
    """Replace the dataset in ``out_dir`` by the one in ``tmp``; the manifest goes first out and last in."""
    remove(out_dir / MANIFEST_FILE)
    for name in (TOKENIZER_DIR, "shards", BUILD_RECORD, REPORT_FILE):
        move_into_place(tmp / name, out_dir / name)
    move_into_place(tmp / MANIFEST_FILE, out_dir / MANIFEST_FILE)
    remove(tmp)


def _sum_splits(splits: dict[str, dict]) -> dict[str, int]:
    """Documents, bytes and tokens of a domain's splits together (the funnel's last stage)."""
    return {key: sum(entry[key] for entry in splits.values()) for key in ("documents", "bytes", "tokens")}


def build_dataset(cfg: BuildConfig, out_dir: Path, progress: bool = True) -> Path:
    """Build the dataset ``cfg`` describes into ``out_dir`` and return ``out_dir``.

    ``out_dir`` ends up with ``tokenizer/``, ``shards/``, ``manifest.json``, ``build.json`` and
    ``report.json``. Raises :class:`~glasslab.errors.UserError` for bad input (nothing is moved then).
    """
    out_dir = Path(out_dir)
    made_out_dir = not out_dir.exists()  # removed again if the build fails: no half-made dataset folder
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / TMP_DIR
    if tmp.exists():
        shutil.rmtree(tmp)
    stage_dir = tmp / "stage"
    stage_dir.mkdir(parents=True)
    timings: dict[str, float] = {}
    funnel, errors = Funnel(), sources.InputErrors()
    filter_drops = dict.fromkeys(FILTER_NAMES, 0)
    try:
        started = time.perf_counter()
        _say(progress, f"reading {len(cfg.sources)} source(s)")
        keys = _process_sources(cfg, stage_dir, funnel, errors, filter_drops)
        timings["process_s"] = time.perf_counter() - started
        domains = sorted(keys)
        if not domains:
            drops = ", ".join(f"{name} {n}" for name, n in filter_drops.items() if n)
            raise UserError(
                f"no documents left after processing (filter drops: {drops or 'none'}); "
                "loosen the filters or add sources"
            )
        _say(
            progress,
            f"{sum(map(len, keys.values()))} documents kept in {len(domains)} domain(s); "
            "splitting eval and decontaminating",
        )
        mark = time.perf_counter()
        _split_and_decontaminate(cfg, stage_dir, keys, funnel)
        timings["split_decontaminate_s"] = time.perf_counter() - mark
        _say(progress, f"training a {cfg.tokenizer.vocab_size}-token byte-level BPE")
        mark = time.perf_counter()
        tokenizer = train_tokenizer(
            _tokenizer_sample(cfg, stage_dir, domains), cfg.tokenizer.vocab_size, cfg.tokenizer.min_frequency
        )
        save_tokenizer(tokenizer, tmp / TOKENIZER_DIR)
        timings["tokenizer_s"] = time.perf_counter() - mark
        _say(progress, f"tokenizing into shards with {cfg.num_workers} worker(s)")
        mark = time.perf_counter()
        eot_id = tokenizer.token_to_id(EOT)
        vocab_size = tokenizer.get_vocab_size()
        entries = _write_shards(cfg, tmp, stage_dir, domains, tokenizer.to_str(), eot_id, vocab_size)
        timings["shards_s"] = time.perf_counter() - mark
        shutil.rmtree(stage_dir)
        described = [sources.describe(s) for s in cfg.sources]  # name, version, licence: a rebuildable corpus
        manifest = {
            "format": "glasslab-dataset/1",
            "python_version": platform.python_version(),
            "config_hash": config_hash(cfg),
            "config": to_dict(cfg, versioned_only=True),
            "vocab_size": vocab_size,
            "eot_id": eot_id,
            "dtype": token_dtype(vocab_size).name,
            "tokenizer": {
                "file": f"{TOKENIZER_DIR}/tokenizer.json",
                "sha256": file_sha256(tmp / TOKENIZER_DIR / "tokenizer.json"),
            },
            "domains": entries,
            "sources": described,
        }
        _write_json(tmp / MANIFEST_FILE, manifest)
        tokens = {"documents": 0, "bytes": 0, "tokens": 0}
        for splits in entries.values():
            for key, value in _sum_splits(splits).items():
                tokens[key] += value
        timings["total_s"] = time.perf_counter() - started
        record = {
            "python_version": platform.python_version(),
            "sources": described,
            "funnel": funnel.to_list() + [{"stage": "tokens", **tokens}],
            "funnel_by_domain": {domain: stages + [{"stage": "tokens", **_sum_splits(entries.get(domain, {}))}]
                                 for domain, stages in funnel.by_domain().items()},
            "filters": filter_drops,
            "errors": errors.to_dict(),
            "timings": timings,
            "config": to_dict(cfg),
        }
        _write_json(tmp / BUILD_RECORD, record)
        _write_json(
            tmp / REPORT_FILE,
            report.make_report(tmp, samples_per_domain=cfg.samples_per_domain, seed=cfg.seed),
        )
        _move_into_place(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if made_out_dir:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    for line in sources.describe_errors(record["errors"], str(out_dir / BUILD_RECORD)):
        _warn(line)
    _say(progress, f"done in {timings['total_s']:.1f} s: {out_dir}")
    return out_dir


STEP_NAME = "data"
"""What experiments and ``glasslab data build`` call a data build step, so each finds the other's folder."""


def build_step(ctx) -> Path:
    """Lab step function: build ``ctx.config`` (a BuildConfig or its plain data) into ``ctx.output_dir``
    (progress lines, unless ``cfg.progress`` is off, go to stderr: the terminal for ``glasslab data build``,
    ``step.log`` in an experiment)."""
    cfg = ctx.config if isinstance(ctx.config, BuildConfig) else from_dict(BuildConfig, ctx.config)
    return build_dataset(cfg, Path(ctx.output_dir), progress=cfg.progress)
