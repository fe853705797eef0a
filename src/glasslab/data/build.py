"""The data build as stages of tasks: read → exact dedup → near dedup → survivors → eval split →
its overlap with training → tokenizer → tokenize → assemble, then the manifest and the report.

Each stage is a list of tasks (:mod:`glasslab.data.runner` runs them on local processes or on Ray,
``--workers`` at a time); this module, the driver, only cuts the work and makes the few whole-corpus
choices that need small inputs (where a source's cap falls, the eval documents, the common n-grams,
the reference table). Everything goes into a **work folder** keyed by the config's hash,
``<out>/.build-work-<hash>/``: a build killed at any moment keeps it, and the same build run again
resumes with the tasks it had not finished (a build of another config removes it). A build that fails
on bad input removes it (and a dataset folder it made), so nothing half-made is left. The finished
dataset is moved into ``<out>`` with ``manifest.json`` last, so a reader never trusts a half-moved one.

What is built depends on the config and the input only: every stage works in the canonical document
order (:mod:`glasslab.data.inputs`) and decides by fixed rules in that order (the lowest key of an exact
duplicate group stays), so the shards, the manifest's hash and the report are the same with 1 or 3
workers, on processes or Ray, killed or not.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from glasslab.config import config_hash, from_dict, to_dict
from glasslab.data import report, sources
from glasslab.data.config import BuildConfig
from glasslab.data.decontaminate import choose_eval, text_ngrams
from glasslab.data.dedup_stages import (
    MIN_PARTITION_PAIRS,
    PartitionArgs,
    VerifyArgs,
    bucket_stage,
    cluster_stage,
    exact_stage,
    slot_counts,
    slot_ranges,
    task_folder,
    verify_stage,
)
from glasslab.data.docstore import TaskDocuments, local_of, task_of
from glasslab.data.filters import funnel_filters
from glasslab.data.inputs import ReadTask, plan_read_tasks, plan_signature
from glasslab.data.progress import Progress
from glasslab.data.provenance import REFS_FILE
from glasslab.data.read_stage import ReadArgs, read_stage
from glasslab.data.runner import Stage, Task, TaskRunner
from glasslab.data.shards import FORMAT, SPLITS, token_dtype
from glasslab.data.stages import (
    CANDIDATE,
    AssembleArgs,
    NgramArgs,
    SurvivorArgs,
    TokenizeArgs,
    TokenizerArgs,
    assemble_stage,
    ngram_stage,
    survivor_stage,
    tokenize_stage,
    tokenizer_stage,
)
from glasslab.data.tokenizer import EOT, TOKENIZER_DIR, load_tokenizer
from glasslab.errors import UserError
from glasslab.lab.attempt import RAY_ADDRESS_ENV
from glasslab.lab.step import Resources, Step
from glasslab.layout import (
    BUILD_PROGRESS,
    BUILD_RECORD,
    MANIFEST_FILE,
    REPORT_FILE,
    SHARDS_DIR,
    TOKEN_SHARD_SUFFIX,
    file_sha256,
    move_into_place,
    read_json,
    remove,
    write_json_atomic,
)

WORK_PREFIX = ".build-work-"
PLAN_FILE = "plan.json"


def work_folder(cfg: BuildConfig, out_dir: Path) -> Path:
    """Where the build of ``cfg`` into ``out_dir`` keeps its tasks' outputs until it is done."""
    return Path(out_dir) / f"{WORK_PREFIX}{config_hash(cfg)}"


def backend_of(cfg: BuildConfig) -> str:
    """``cfg.backend``; else Ray when an address is given or the lab's Ray backend runs this build as a step."""
    return cfg.backend or ("ray" if cfg.ray_address or os.environ.get(RAY_ADDRESS_ENV) else "local")


class Funnel:
    """Documents and UTF-8 bytes left after each stage, per domain (tasks' counts added up)."""

    def __init__(self, stages: list[str]) -> None:
        self.stages = stages
        self.domains: dict[str, dict[str, list[int]]] = {}

    def add(self, domain: str, stage: str, documents: int, nbytes: int, tokens: int | None = None) -> None:
        entry = self.domains.setdefault(domain, {}).setdefault(stage, [0, 0, 0])
        entry[0] += documents
        entry[1] += nbytes
        entry[2] += tokens or 0

    def _row(self, stage: str, counts: list[int]) -> dict:
        row = {"stage": stage, "documents": counts[0], "bytes": counts[1]}
        return {**row, "tokens": counts[2]} if stage == "tokens" else row

    def to_list(self) -> list[dict]:
        totals = []
        for stage in self.stages:
            sums = [sum(d.get(stage, [0, 0, 0])[k] for d in self.domains.values()) for k in range(3)]
            totals.append(self._row(stage, sums))
        return totals

    def by_domain(self) -> dict[str, list[dict]]:
        """The funnel of each domain, every stage listed (zeros where a domain lost everything)."""
        return {domain: [self._row(s, counts.get(s, [0, 0, 0])) for s in self.stages]
                for domain, counts in sorted(self.domains.items())}


class Build:
    """One build's driver: the config, its read tasks and what each stage left for the next. Its stages run in
    order (:func:`build_dataset` calls them all; the bench times some of them alone)."""

    def __init__(self, cfg: BuildConfig, work: Path, tasks: list[ReadTask], runner: TaskRunner,
                 progress: Progress) -> None:
        self.cfg, self.work, self.tasks, self.runner, self.progress = cfg, work, tasks, runner, progress
        self.filters = funnel_filters({s.preset for s in cfg.sources})
        self.funnel = Funnel(["raw", "normalized", *(f"filter:{n}" for n in self.filters), "exact_dedup",
                              "near_dedup", "tokens"])
        self.errors = sources.InputErrors()
        self.filter_drops = dict.fromkeys(self.filters, 0)
        self._filled: set[int] = set()

    def domain(self, task: int) -> str:
        return self.cfg.sources[self.tasks[task].source].domain

    # --- read, and the sources' caps -------------------------------------------------------------

    def read(self) -> None:
        cfg = self.cfg
        tasks = [Task(f"{t.index:06d}", read_stage, ReadArgs(t, cfg.sources[t.source], cfg.filters, cfg.dedup,
                                                             cfg.seed, cfg.strict, cfg.skip_bad_files), t.input_bytes)
                 for t in self.tasks]
        results = self.runner.run("read", tasks, skip=self._past_cap)
        self.read_results = {t.index: results[f"{t.index:06d}"] for t in self.tasks if f"{t.index:06d}" in results}
        self.raw_limits, inside = self._cap()
        # What a task past its source's cap met is not part of the build (whether it ran depends on timing).
        self.read_results = {i: r for i, r in self.read_results.items() if i in inside}
        self.block_counts = _sum_block_counts(self.read_results.values())
        by_source: dict[int, sources.InputErrors] = defaultdict(sources.InputErrors)
        for index, result in sorted(self.read_results.items()):
            source_errors = by_source[self.tasks[index].source]
            self.errors.merge(result["errors"])
            source_errors.merge(result["errors"])
            source_errors.last_problem = result["last_problem"] or source_errors.last_problem
        for number, source in enumerate(self.cfg.sources):
            if not any(self.raw_limits.get(t.index, 0) for t in self.tasks if t.source == number):
                errors = by_source[number]
                raise sources.empty_source(source, errors, errors.skipped())
        self.kept_limits = {}
        for index, result in sorted(self.read_results.items()):
            limit = self.raw_limits[index]
            self.kept_limits[index] = (result["documents_kept"] if limit >= result["documents_in"] else
                                       TaskDocuments(task_folder(self.work, "read", index)).kept_limit(limit))

    def _past_cap(self, task: Task, results: dict[str, dict]) -> bool:
        """Whether read tasks before ``task`` that have finished already fill its source's cap (then so does
        the whole prefix before it, and it need not run)."""
        read_task: ReadTask = task.arg.task
        source = self.cfg.sources[read_task.source]
        if not (source.max_documents or source.max_bytes):
            return False
        if read_task.source in self._filled:  # results only grow: a filled cap stays filled
            return True
        documents = nbytes = 0
        for earlier in self.tasks[: read_task.index]:
            result = results.get(f"{earlier.index:06d}")
            if earlier.source == read_task.source and result is not None:
                documents, nbytes = documents + result["documents_in"], nbytes + result["raw_bytes"]
        if (source.max_documents and documents >= source.max_documents) or (
                source.max_bytes and nbytes >= source.max_bytes):
            self._filled.add(read_task.source)
            return True
        return False

    def _cap(self) -> tuple[dict[int, int], set[int]]:
        """Raw documents of each read task inside its source's caps, in canonical order, and the tasks that
        start inside them."""
        limits: dict[int, int] = {}
        inside_tasks: set[int] = set()
        taken: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for task in self.tasks:
            result = self.read_results.get(task.index)
            source = self.cfg.sources[task.source]
            if result is None:
                continue
            documents, nbytes = taken[task.source]
            if not ((source.max_documents and documents >= source.max_documents)
                    or (source.max_bytes and nbytes >= source.max_bytes)):
                inside_tasks.add(task.index)
            count = result["documents_in"]
            if source.max_documents or source.max_bytes:
                raw = np.load(task_folder(self.work, "read", task.index) / "raw.npy")
                before = nbytes + np.cumsum(raw["bytes"].astype(np.int64)) - raw["bytes"].astype(np.int64)
                inside = np.ones(len(raw), dtype=bool)
                if source.max_documents:
                    inside &= documents + np.arange(len(raw)) < source.max_documents
                if source.max_bytes:
                    inside &= before < source.max_bytes
                count = int(inside.sum())  # a prefix: both bounds grow along the task
                nbytes += int(raw["bytes"][:count].sum())
            else:
                nbytes += result["raw_bytes"]
            limits[task.index] = count
            taken[task.source] = [documents + count, nbytes]
        return limits, inside_tasks

    # --- dedup -------------------------------------------------------------------------------------

    def _share(self, counts: np.ndarray, first: int, stop: int) -> int:
        """The kept text a partition stands for (its share of the records), for the stage's MB/s."""
        total = int(counts.sum())
        return int(self.total_bytes * int(counts[first:stop].sum()) / total) if total else 0

    def dedup(self) -> None:
        work, cfg = self.work, self.cfg
        held = tuple(sorted(self.kept_limits.items()))
        self.total_bytes = sum(r["kept_bytes"] for r in self.read_results.values())
        self.exact_removed: tuple[str, ...] = ()
        self.near_removed: tuple[str, ...] = ()
        if cfg.dedup.exact:
            counts = slot_counts(work, self.kept_limits, "exact")
            tasks = [Task(f"{i:04d}", exact_stage, PartitionArgs(work, held, a, b), self._share(counts, a, b))
                     for i, (a, b) in enumerate(slot_ranges(counts))]
            self.runner.run("exact", tasks)
            self.exact_removed = tuple(str(task_folder(work, "exact", t.id) / "removed.npy") for t in tasks)
        if not cfg.dedup.near:
            return
        counts = slot_counts(work, self.kept_limits, "bands")
        buckets = [Task(f"{i:04d}", bucket_stage, PartitionArgs(work, held, a, b, self.exact_removed),
                        self._share(counts, a, b)) for i, (a, b) in enumerate(slot_ranges(counts))]
        self.runner.run("buckets", buckets, counts="candidate pairs")
        pairs = sum(np.diff(np.load(task_folder(work, "buckets", t.id) / "pairs.slots.npy")) for t in buckets)
        ids = tuple(t.id for t in buckets)
        verify = [Task(f"{i:04d}", verify_stage, VerifyArgs(work, ids, a, b, cfg.dedup), self._share(pairs, a, b))
                  for i, (a, b) in enumerate(slot_ranges(pairs, MIN_PARTITION_PAIRS))]
        self.runner.run("verify", verify, counts="pairs similar")
        self.runner.run("clusters", [Task("0000", cluster_stage, (work, tuple(t.id for t in verify)),
                                          self.total_bytes)], counts="near-duplicate docs to remove")
        self.near_removed = (str(task_folder(work, "clusters", "0000") / "removed.npy"),)

    # --- survivors, eval split, its overlap with training -------------------------------------------

    def survivors(self) -> None:
        tasks = [Task(f"{i:06d}", survivor_stage, SurvivorArgs(
            self.work, i, self.raw_limits[i], self.filters, self.exact_removed, self.near_removed,
            self.cfg.eval.max_documents), self.read_results[i]["kept_bytes"]) for i in sorted(self.read_results)]
        results = self.runner.run("survivors", tasks)
        self.survivor_counts: dict[str, int] = defaultdict(int)
        for task in tasks:
            result, domain = results[task.id], self.domain(task.arg.task)
            for stage, (documents, nbytes) in result["funnel"].items():
                self.funnel.add(domain, stage, documents, nbytes)
            for name, count in result["filters"].items():
                self.filter_drops[name] += count
            self.survivor_counts[domain] += result["documents_kept"]
        if not any(self.survivor_counts.values()):
            drops = ", ".join(f"{name} {n}" for name, n in self.filter_drops.items() if n)
            raise UserError(f"no documents left after processing (filter drops: {drops or 'none'}); "
                            "loosen the filters or add sources")

    def choose_eval(self) -> None:
        """The held-out documents of each domain (its smallest split keys) and their n-grams, for the next stages."""
        eval_dir = self.work / "eval"
        eval_dir.mkdir(exist_ok=True)
        chosen = []
        for domain, count in sorted(self.survivor_counts.items()):
            if not count:
                continue
            parts = [np.load(task_folder(self.work, "survivors", i) / "candidates.npy")
                     for i in self.read_results if self.domain(i) == domain]
            candidates = np.concatenate(parts) if parts else np.zeros(0, dtype=CANDIDATE)
            candidates = candidates[np.lexsort((candidates["key"], candidates["split_key"]))]
            k = choose_eval(count, candidates["size"][: self.cfg.eval.max_documents], self.cfg.eval)
            chosen.append(candidates["key"][:k])
        keys = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, np.int64)
        np.save(eval_dir / "keys.npy", keys)
        grams = [np.zeros(0, np.uint64)]
        stores: dict[int, TaskDocuments] = {}
        for key in keys.tolist():
            task = int(task_of(np.int64(key)))
            store = stores.setdefault(task, TaskDocuments(task_folder(self.work, "read", task)))
            grams.append(text_ngrams(store.text(int(local_of(np.int64(key)))).split(), self.cfg.eval.ngram_words))
        np.save(eval_dir / "ngrams.npy", np.unique(np.concatenate(grams)))

    def overlap_and_tokenizer(self) -> None:
        """Two jobs that need neither the other, run at once so that the tokenizer's one task does not leave the
        other workers idle: the eval split's overlap with training (:meth:`_save_overlap`) and the tokenizer,
        trained on the first training bytes of each domain in canonical order (``tokenizer_json``)."""
        tok = self.cfg.tokenizer
        domains = sorted(d for d, count in self.survivor_counts.items() if count)  # a domain left empty has no shards
        self.order = tuple((d, tuple(i for i in sorted(self.read_results) if self.domain(i) == d)) for d in domains)
        sample = TokenizerArgs(self.work, self.order, tok.sample_bytes, tok.vocab_size, tok.min_frequency)
        ngrams = [Task(f"{i:06d}", ngram_stage, NgramArgs(self.work, i, self.cfg.eval.ngram_words),
                       self.read_results[i]["kept_bytes"]) for i in sorted(self.read_results)]
        results = self.runner.run_stages([
            Stage("tokenizer", [Task("0000", tokenizer_stage, sample, min(tok.sample_bytes, self.total_bytes))],
                  "docs sampled"),
            Stage("ngrams", ngrams, "training docs scanned")])
        self.tokenizer_json = task_folder(self.work, "tokenizer", "0000") / TOKENIZER_DIR / "tokenizer.json"
        self._save_overlap(results["ngrams"])

    def _save_overlap(self, results: dict[str, dict]) -> None:
        """The eval n-grams that training documents hold too (``eval/shared.npy``): the eval split's loss leaves
        their tokens out. Those held by more than ``common_ngram_documents`` training documents are
        boilerplate and stay counted (0: none is)."""
        eval_ngrams = np.load(self.work / "eval" / "ngrams.npy")
        counts = np.zeros(len(eval_ngrams), dtype=np.int64)
        for task in results:
            counts += np.load(task_folder(self.work, "ngrams", task) / "counts.npy")
        cutoff = self.cfg.eval.common_ngram_documents
        common = counts > cutoff if cutoff else np.zeros(len(counts), dtype=bool)
        self.overlap_counts = {"eval_ngrams": len(counts), "shared_ngrams": int(((counts > 0) & ~common).sum()),
                               "common_ngrams": int(common.sum()),
                               "training_documents_sharing": sum(r["sharing"] for r in results.values())}
        np.save(self.work / "eval" / "shared.npy", eval_ngrams[(counts > 0) & ~common])

    # --- tokens, shards ------------------------------------------------------------------------------

    def tokenize(self) -> dict:
        cfg, work, order, tokenizer_json = self.cfg, self.work, self.order, self.tokenizer_json
        bases = self._line_bases()
        tasks = [Task(f"{i:06d}", tokenize_stage, TokenizeArgs(work, i, tokenizer_json, bases.get(i, 0),
                                                               cfg.eval.ngram_words),
                      self.read_results[i]["kept_bytes"]) for i in sorted(self.read_results)]
        results = self.runner.run("tokenize", tasks)
        refs, mapping = self._reference_table()
        vocab = load_tokenizer(tokenizer_json.parent).get_vocab_size()
        pieces = [Task(f"{domain}.{split}", assemble_stage, AssembleArgs(
            work, split, tuple((i, mapping[i]) for i in tasks_), token_dtype(vocab).name),
            sum(results[f"{i:06d}"]["splits"][split]["bytes"] for i in tasks_))
            for domain, tasks_ in order for split in SPLITS]
        assembled = self.runner.run("assemble", pieces)
        return {"order": order, "tokenize": results, "assembled": assembled, "refs": refs,
                "tokenizer_json": tokenizer_json}

    def _line_bases(self) -> dict[int, int]:
        """Lines before each JSONL byte-range task in its file (the tasks before it in that file read them)."""
        bases, running = {}, defaultdict(int)
        for task in self.tasks:
            if task.stop >= 0 and task.index in self.read_results and self.cfg.sources[task.source].kind == "jsonl":
                bases[task.index] = running[task.files[0]]
                running[task.files[0]] += self.read_results[task.index]["lines"]
        return bases

    def _reference_table(self) -> tuple[list, dict[int, tuple[int, ...]]]:
        """The references of the documents in the shards, in canonical order (a file cut into ranges listed
        once), and each task's local → global ids (-1: no document of the shards comes from it)."""
        table: list[list] = []
        where: dict[tuple[int, str], int] = {}
        mapping = {}
        for index in sorted(self.read_results):
            source = self.tasks[index].source
            piece = task_folder(self.work, "tokenize", index)
            used = set(np.concatenate([np.load(piece / f"{split}.prov.npy")["ref"] for split in SPLITS]).tolist())
            ids = []
            for local, ref in enumerate(TaskDocuments(task_folder(self.work, "read", index)).refs()):
                if local not in used:
                    ids.append(-1)
                    continue
                key = (source, ref)
                if key not in where:
                    where[key] = len(table)
                    table.append([source, ref])
                ids.append(where[key])
            mapping[index] = tuple(ids)
        return table, mapping

def _link(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source`` (the task outputs stay whole for a resume), else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _final_folder(build: Build, made: dict, final: Path) -> dict:
    """Lay the dataset out in ``final`` (tokenizer, shards, refs); returns the manifest's domain entries."""
    remove(final)
    tokenizer_dir = made["tokenizer_json"].parent
    shutil.copytree(tokenizer_dir, final / TOKENIZER_DIR)
    entries: dict[str, dict] = {}
    for domain, tasks in made["order"]:
        entries[domain] = {}
        for split in SPLITS:
            piece = task_folder(build.work, "assemble", f"{domain}.{split}")
            result = made["assembled"][f"{domain}.{split}"]
            shard = f"{SHARDS_DIR}/{domain}/{split}"
            names = {"file": shard + TOKEN_SHARD_SUFFIX, "index": f"{shard}.idx.npy", "provenance": f"{shard}.prov.npy"}
            if split == "eval":
                names["scored"] = f"{shard}.scored.npy"
            for key, produced in (("file", "tokens.bin"), ("index", "ends.npy"), ("provenance", "prov.npy"),
                                  ("scored", "scored.npy")):
                if key in names:
                    _link(piece / produced, final / names[key])
            splits = [made["tokenize"][f"{i:06d}"]["splits"][split] for i in tasks]
            entries[domain][split] = {
                **names,
                "documents": result["documents_in"],
                "tokens": result["tokens"],
                "bytes": sum(s["bytes"] for s in splits),
                "sha256": result["sha256"]["tokens.bin"],
                "index_sha256": result["sha256"]["ends.npy"],
                "provenance_sha256": result["sha256"]["prov.npy"],
                **({"scored_tokens": result["scored_tokens"], "scored_sha256": result["sha256"]["scored.npy"]}
                   if split == "eval" else {}),
            }
    refs = final / REFS_FILE
    refs.parent.mkdir(parents=True, exist_ok=True)
    refs.write_text("".join(json.dumps(entry) + "\n" for entry in made["refs"]), encoding="utf-8")
    return entries


def _move_into_place(final: Path, out_dir: Path) -> None:
    """Replace the dataset in ``out_dir`` by the one in ``final``; the manifest goes first out and last in."""
    remove(out_dir / MANIFEST_FILE)
    for name in (TOKENIZER_DIR, SHARDS_DIR, BUILD_RECORD, REPORT_FILE):
        move_into_place(final / name, out_dir / name)
    move_into_place(final / MANIFEST_FILE, out_dir / MANIFEST_FILE)


def _sum_splits(splits: dict[str, dict]) -> dict[str, int]:
    """Documents, bytes and tokens of a domain's splits together (the funnel's last stage)."""
    return {key: sum(entry[key] for entry in splits.values()) for key in ("documents", "bytes", "tokens")}


def _prepare_work(work: Path, tasks: list[ReadTask]) -> int:
    """Keep ``work`` if it was made for the same input (the same tasks over the same files), else start it
    afresh; returns how many stages' outputs it holds."""
    plan = {"tasks": plan_signature(tasks)}
    if work.is_dir() and read_json(work / PLAN_FILE) != plan:
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    if not (work / PLAN_FILE).is_file():
        write_json_atomic(work / PLAN_FILE, plan)
    return sum(1 for p in work.iterdir() if p.is_dir())


def build_dataset(cfg: BuildConfig, out_dir: Path, progress: bool = True) -> Path:
    """Build the dataset ``cfg`` describes into ``out_dir`` and return ``out_dir``.

    ``out_dir`` ends up with ``tokenizer/``, ``shards/``, ``manifest.json``, ``build.json`` and
    ``report.json``. Raises :class:`~glasslab.errors.UserError` for bad input (nothing is left then); any
    other interruption keeps the work folder, and the same build resumes from it.
    """
    out_dir = Path(out_dir)
    made_out_dir = not out_dir.exists()  # removed again on bad input: no half-made dataset folder
    out_dir.mkdir(parents=True, exist_ok=True)
    work = work_folder(cfg, out_dir)
    for stale in out_dir.glob(f"{WORK_PREFIX}*"):
        if stale != work:
            shutil.rmtree(stale, ignore_errors=True)
    runner = None
    try:
        tasks = plan_read_tasks(cfg.sources)
        resumed = _prepare_work(work, tasks)
        status = Progress(out_dir / BUILD_PROGRESS, enabled=cfg.progress)
        runner = TaskRunner(work, cfg.num_workers, backend_of(cfg), status, cfg.ray_address)
        status.say(f"{len(tasks)} read task(s) from {len(cfg.sources)} source(s), {runner.workers} worker(s) "
                   f"({runner.backend})" + (f"; resuming in {work}" if resumed else ""))
        record = _build(cfg, work, tasks, runner, status)
        _move_into_place(work / "final", out_dir)
    except UserError:
        if runner is not None:
            runner.close()
        shutil.rmtree(work, ignore_errors=True)
        remove(out_dir / BUILD_PROGRESS)
        if made_out_dir:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    except BaseException:
        if runner is not None:
            runner.close(wait=False)
        raise  # the work folder stays: the same build resumes from it
    runner.close()
    remove(out_dir / BUILD_PROGRESS)
    shutil.rmtree(work, ignore_errors=True)
    for line in sources.describe_errors(record["errors"], str(out_dir / BUILD_RECORD)):
        status.warn(line)
    status.say(f"done in {record['timings']['total_s']:.1f} s: {out_dir}")
    return out_dir


def _sum_block_counts(results) -> list[dict]:
    """Each read block's documents in and out over the read tasks (``blocks.py``), in chain order."""
    totals: dict[str, dict] = {}
    for result in results:
        for name, counts in result.get("blocks", {}).items():  # a task read before blocks had counts: none
            into = totals.setdefault(name, {"block": name, "documents_in": 0, "documents_out": 0})
            into["documents_in"] += counts["documents_in"]
            into["documents_out"] += counts["documents_out"]
    return list(totals.values())


def _build(cfg: BuildConfig, work: Path, tasks: list[ReadTask], runner: TaskRunner, status: Progress) -> dict:
    started = time.perf_counter()
    build = Build(cfg, work, tasks, runner, status)
    build.read()
    build.dedup()
    build.survivors()
    build.choose_eval()
    build.overlap_and_tokenizer()
    made = build.tokenize()
    final = work / "final"
    entries = _final_folder(build, made, final)
    for domain, splits in entries.items():
        totals = _sum_splits(splits)
        build.funnel.add(domain, "tokens", totals["documents"], totals["bytes"], totals["tokens"])
    for removal in report.large_removals(build.funnel.by_domain()):
        status.warn(removal["text"])
    tokenizer = load_tokenizer(final)
    described = [sources.describe(s) for s in cfg.sources]  # name, version, licence: a rebuildable corpus
    manifest = {
        "format": FORMAT,
        "python_version": platform.python_version(),
        "config_hash": config_hash(cfg),
        "config": to_dict(cfg, versioned_only=True),
        "vocab_size": tokenizer.get_vocab_size(),
        "eot_id": tokenizer.token_to_id(EOT),
        "dtype": token_dtype(tokenizer.get_vocab_size()).name,
        "tokenizer": {"file": f"{TOKENIZER_DIR}/tokenizer.json",
                      "sha256": file_sha256(final / TOKENIZER_DIR / "tokenizer.json")},
        "domains": entries,
        "provenance": {"file": REFS_FILE, "sha256": file_sha256(final / REFS_FILE), "references": len(made["refs"]),
                       "bytes_per_document": 12},
        "sources": described,
    }
    write_json_atomic(final / MANIFEST_FILE, manifest, sort_keys=True)
    stages = [s.to_dict() for s in status.stages]
    record = {
        "python_version": platform.python_version(),
        "sources": described,
        "funnel": build.funnel.to_list(),
        "funnel_by_domain": build.funnel.by_domain(),
        "filters": build.filter_drops,
        "read_blocks": build.block_counts,
        "errors": build.errors.to_dict(),
        "overlap": build.overlap_counts,
        "stages": stages,
        "reruns": runner.reruns,
        "workers": runner.workers,
        "backend": runner.backend,
        "timings": {**{s["stage"]: s["seconds"] for s in stages}, "total_s": time.perf_counter() - started},
        "config": to_dict(cfg),
    }
    write_json_atomic(final / BUILD_RECORD, record, sort_keys=True)  # the report reads it
    write_json_atomic(final / REPORT_FILE, report.make_report(final, samples_per_domain=cfg.samples_per_domain,
                                                              seed=cfg.seed), sort_keys=True)
    after_s, after_cpu_s = status.driver_alone()  # the driver's serial tail, the report included
    record["driver_after"] = {"seconds": round(after_s, 4), "cpu_s": round(after_cpu_s, 4)}
    record["timings"]["total_s"] = time.perf_counter() - started
    write_json_atomic(final / BUILD_RECORD, record, sort_keys=True)
    return record


STEP_NAME = "data"
"""What experiments and ``glasslab data build`` call a data build step, so each finds the other's folder."""
STEP_RESOURCES = Resources(cpus=0)
"""A data step asks for no CPU of its own: its process only hands out tasks, each of which asks for its own
(on Ray, a step holding a CPU while its tasks wait for CPUs would starve them)."""


def data_step(cfg: BuildConfig, folder: str | Path | None = None) -> Step:
    """The lab step that builds ``cfg`` (``folder`` pins its output folder, e.g. ``--out``)."""
    return Step(STEP_NAME, build_step, cfg, resources=STEP_RESOURCES, folder=folder)


def build_step(ctx) -> Path:
    """Lab step function: build ``ctx.config`` (a BuildConfig or its plain data) into ``ctx.output_dir``
    (progress lines, unless ``cfg.progress`` is off, go to stderr: the terminal for ``glasslab data build``,
    ``step.log`` in an experiment)."""
    cfg = ctx.config if isinstance(ctx.config, BuildConfig) else from_dict(BuildConfig, ctx.config)
    return build_dataset(cfg, Path(ctx.output_dir), progress=cfg.progress)

