"""Bad input through the real CLI, as a new user makes it: a table of cases, each run as
``python -m glasslab ...`` in a subprocess of its own folder.

Every case asserts its exit status (2, or 0 where the documented behaviour is a success: a damaged
checkpoint is skipped, a malformed record is skipped and counted) and, for a failure, exactly one error
line on stderr, the last, ``glasslab CMD: error: ...``, naming what was wrong (progress lines such as
an executor's plan may come before it); never a ``Traceback``; every file that existed before the
command byte for byte the same afterwards (inputs, the shared dataset and run); no new output a later
step would trust (a dataset or checkpoint manifest, a result, a report, a fit, a succeeded step), and
no output folder at all from a failed data build; for data builds the exact number of documents kept
and what the console said about what was skipped. The cases are written against behaviour (status,
one line, files), not against the folders a command makes, so they hold whichever way a command runs
its step.

One tiny dataset and one tiny finished run are shared by all cases (module fixtures); the cases run
in parallel threads. Read-only cases run the CLI without the power to ignore file permissions: as
root, ``setpriv`` drops every capability, so a folder with mode 0o555 is read-only for it too.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
import zstandard

from cli_runner import run_cli, subprocess_env
from data_helpers import topic_texts
from glasslab.layout import BUILD_RECORD, FIT_FILE, MANIFEST_FILE, REPORT_FILE, RESULT_FILE, STEP_RECORD
from train_data import build_tiny_dataset, tiny_run_config

WORKERS = 3
"""Cases at once: each is mostly a Python process starting (imports), so a third overlaps the waits."""
TRUSTED = {MANIFEST_FILE, RESULT_FILE, REPORT_FILE, FIT_FILE}
"""Files a later step trusts: a failed command must not leave a new one (a succeeded step.json neither)."""


@dataclass(frozen=True)
class Case:
    """One bad input: the command line, what it must say, and what it may leave behind."""

    name: str
    args: tuple[str, ...]
    """CLI arguments; ``{S}`` is the shared folder (``{S}/data``, ``{S}/run``, ``{S}/run.yaml``),
    other ``{key}`` placeholders come from ``setup``."""
    error: str | None
    """Regex the error line must match after ``glasslab CMD: error: ``; None: the command succeeds."""
    command: str
    """``CMD`` of the error line (``data build``, ``train``...)."""
    setup: Callable[[Path, Path], dict] | None = None
    """Makes the case's inputs in its folder (given the folder and the shared folder); returns
    placeholders for ``args``, and under ``keep`` objects to hold open while the command runs."""
    documents: int | None = None
    """A data build that succeeds: documents read from the sources (the funnel's ``raw`` stage)."""
    says: str = ""
    """Regex stderr must match for a documented success (what was skipped and where it is listed)."""
    changes: tuple[str, ...] = ()
    """Paths (relative to the case folder) the command may change: its own output."""
    read_only: tuple[str, ...] = ()
    """Folders (relative to the case folder) made read-only; the command runs unprivileged."""
    media: str = ""
    """A folder (relative to the case folder) that the command sees on read-only media: a copy of
    ``<media>.src`` on a tmpfs mounted read-only in a mount namespace of its own."""
    stdout_lacks: str = ""


@dataclass
class Outcome:
    returncode: int = -1
    stdout: str = ""
    stderr: str = ""
    changed: list[str] = field(default_factory=list)
    new_trusted: list[str] = field(default_factory=list)
    folder: Path = Path()
    seconds: float = 0.0
    problem: str = ""
    """Why the case could not be run (a setup error), reported by its test."""


# --- inputs -------------------------------------------------------------------------------------------


TEXTS = topic_texts()


def texts(n: int, start: int = 0) -> list[str]:
    return TEXTS[start:start + n]


def jsonl_bytes(items: list[str], extra: str = "") -> bytes:
    return ("".join(json.dumps({"text": t}) + "\n" for t in items) + extra).encode()


def build_yaml(folder: Path, *sources: dict, **extra) -> None:
    """A small build config (vocab 300, one worker, no samples) over ``sources``."""
    config = {"sources": list(sources), "tokenizer": {"vocab_size": 300}, "num_workers": 1,
              "samples_per_domain": 0, "eval": {"min_documents": 1}, **extra}
    (folder / "build.yaml").write_text(yaml.safe_dump(config))


def jsonl_source(path: str) -> dict:
    return {"domain": "web", "kind": "jsonl", "path": path}


def one_jsonl(data: bytes, name: str = "a.jsonl") -> Callable[[Path, Path], dict]:
    def setup(folder: Path, shared: Path) -> dict:
        (folder / name).write_bytes(data)
        build_yaml(folder, jsonl_source(name))
        return {}
    return setup


def folder_with_bad_file(kind: str, damage: str) -> Callable[[Path, Path], dict]:
    """``src/`` with a good JSONL file of 20 texts and a damaged compressed one of 30 others."""
    def setup(folder: Path, shared: Path) -> dict:
        (folder / "src").mkdir()
        (folder / "src" / "a.jsonl").write_bytes(jsonl_bytes(texts(20)))
        body = jsonl_bytes(texts(30, 20))
        packed = bytearray(gzip.compress(body) if kind == "gz" else zstandard.ZstdCompressor().compress(body))
        if damage == "truncated":
            packed = packed[: len(packed) * 2 // 3]
        else:
            packed[len(packed) // 2: len(packed) // 2 + 64] = bytes(64)
        (folder / "src" / f"b.jsonl.{kind}").write_bytes(bytes(packed))
        build_yaml(folder, jsonl_source("src"))
        return {}
    return setup


def parquet_file(columns: dict, truncate: bool = False) -> Callable[[Path, Path], dict]:
    def setup(folder: Path, shared: Path) -> dict:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table(columns), folder / "p.parquet")
        if truncate:
            data = (folder / "p.parquet").read_bytes()
            (folder / "p.parquet").write_bytes(data[: len(data) // 2])
        build_yaml(folder, {"domain": "web", "kind": "parquet", "path": "p.parquet"})
        return {}
    return setup


def text_folder(odd_file: bytes) -> Callable[[Path, Path], dict]:
    """``docs/`` with 10 UTF-8 text files and one more holding ``odd_file``."""
    def setup(folder: Path, shared: Path) -> dict:
        (folder / "docs").mkdir()
        for i, t in enumerate(texts(10)):
            (folder / "docs" / f"{i:02d}.txt").write_text(t)
        (folder / "docs" / "zz.txt").write_bytes(odd_file)
        build_yaml(folder, {"domain": "docs", "kind": "text", "path": "docs", "pattern": "*.txt"})
        return {}
    return setup


def a_file(folder: Path, shared: Path) -> dict:
    (folder / "afile").write_text("not a folder\n")
    build_yaml(folder, jsonl_source("a.jsonl"))
    (folder / "a.jsonl").write_bytes(jsonl_bytes(texts(30)))
    return {}


def read_only_folder(folder: Path, shared: Path) -> dict:
    (folder / "ro").mkdir()
    build_yaml(folder, jsonl_source("a.jsonl"))
    (folder / "a.jsonl").write_bytes(jsonl_bytes(texts(30)))
    return {}


def copy_of_run(finished: bool = False, into: str = "run") -> Callable[[Path, Path], dict]:
    """A copy of the shared run (unfinished unless ``finished``: as if killed after its last checkpoint)."""
    def setup(folder: Path, shared: Path) -> dict:
        target = folder / into
        shutil.copytree(shared / "run", target)
        if not finished:  # killed: no result, its step record still says running (no lock holds it)
            (target / RESULT_FILE).unlink()
            record = json.loads((target / STEP_RECORD).read_text())
            (target / STEP_RECORD).write_text(json.dumps({**record, "status": "running"}))
        return {}
    return setup


def damaged_run(damage: Callable[[Path], None]) -> Callable[[Path, Path], dict]:
    def setup(folder: Path, shared: Path) -> dict:
        copy_of_run()(folder, shared)
        damage(folder / "run")
        return {}
    return setup


def truncate_newest_checkpoint(run: Path) -> None:
    newest = sorted((run / "checkpoints").glob("step-*"))[-1]
    data = (newest / "model.pt").read_bytes()
    (newest / "model.pt").write_bytes(data[: len(data) // 2])


def damaged_dataset(damage: Callable[[Path], None]) -> Callable[[Path, Path], dict]:
    def setup(folder: Path, shared: Path) -> dict:
        shutil.copytree(shared / "data", folder / "data")
        damage(folder / "data")
        return {}
    return setup


def truncate_shard(data: Path) -> None:
    shard = data / "shards" / "code" / "train.bin"
    shard.write_bytes(shard.read_bytes()[:1001])


def killed_build(folder: Path, shared: Path) -> dict:
    """A dataset folder whose build was SIGKILLed midway (its work folder is there, its manifest not)."""
    (folder / "a.jsonl").write_bytes(jsonl_bytes(TEXTS * 3))
    build_yaml(folder, jsonl_source("a.jsonl"))
    build = subprocess.Popen([sys.executable, "-m", "glasslab", "data", "build", "build.yaml", "--out", "ds",
                              "--quiet"], cwd=folder, env=subprocess_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list((folder / "ds").glob(".build-work-*/read/*/done.json")):
        assert build.poll() is None and time.monotonic() < deadline, "the build ended before it could be killed"
        time.sleep(0.005)
    build.send_signal(signal.SIGKILL)
    build.wait()
    assert not (folder / "ds" / MANIFEST_FILE).exists()
    return {}


def rung_runs(folder: Path, shared: Path) -> dict:
    """Three finished ladder rungs as the planner and trainer leave them (for ``ladder fit``)."""
    from glasslab import track

    for i in range(3):
        run_dir = folder / "lab" / f"rung-{i}"
        flops = 1e12 * 4.0**i
        steps = 100 * 2**i  # tokens grow with parameters: a plain (not isoFLOP) ladder
        extra = {"role": "rung", "ladder": "t", "rung": f"r{i}", "seed": 0, "size_name": "1M-A1M",
                 "params_active": 1e5 * 2**i, "flops": flops, "steps": steps, "batch_size": 8, "seq_len": 32,
                 "tokens": steps * 8 * 32}
        run = track.init(run_dir, {"model": {"d_model": 32 * 2**i, "vocab_size": 64}}, record_extra=extra)
        loss = 2.0 + 50.0 * flops**-0.1
        for step in (steps // 2, steps):
            run.log({"eval/macro/loss": loss + (0.1 if step < steps else 0.0)}, step=step)
        run.finish()
        (run_dir / RESULT_FILE).write_text(json.dumps({"eval/macro/loss": loss}))
    (folder / "ro").mkdir()
    return {}


def busy_port(folder: Path, shared: Path) -> dict:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return {"port": listener.getsockname()[1], "keep": [listener]}


def files(contents: dict[str, str | bytes]) -> Callable[[Path, Path], dict]:
    """Files by path (relative to the case folder) with the given contents."""
    def setup(case_folder: Path, shared: Path) -> dict:
        for name, content in contents.items():
            path = case_folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return {}
    return setup


def both(*setups: Callable[[Path, Path], dict]) -> Callable[[Path, Path], dict]:
    def setup(folder: Path, shared: Path) -> dict:
        merged: dict = {}
        for one in setups:
            merged.update(one(folder, shared))
        return merged
    return setup


GOOD = jsonl_bytes(texts(30))
BUILD = ("data", "build", "build.yaml", "--out", "ds", "--quiet")


def build_with(*overrides: str) -> tuple[str, ...]:
    return ("data", "build", "build.yaml", *overrides, "--out", "ds", "--quiet")
TRAIN = ("train", "{S}/run.yaml")
CHATS = [{"messages": [{"role": "user", "content": f"What is {i} squared?"},
                       {"role": "assistant", "content": f"{i * i}."}]} for i in range(4)]
PAIRS = [{"prompt": [{"role": "user", "content": f"What is {i} squared?"}],
          "chosen": {"role": "assistant", "content": f"{i * i}."},
          "rejected": {"role": "assistant", "content": f"{i * i}." if i == 2 else f"{i * i + 1}."}} for i in range(30)]
"""Pair 2 (line 3) offers the same reply twice: skipped, counted and said."""

CASES = [
    # --- data build: files ------------------------------------------------------------------------
    Case("bom_jsonl_keeps_its_first_record", BUILD, None, "data build",
         one_jsonl(b"\xef\xbb\xbf" + GOOD), documents=30, changes=("ds",)),
    Case("truncated_zst_fails_naming_it", BUILD, r"src/b\.jsonl\.zst: truncated zstd stream after \d+ records",
         "data build", folder_with_bad_file("zst", "truncated")),
    Case("truncated_gz_fails_naming_it", BUILD, r"src/b\.jsonl\.gz: truncated gzip stream after \d+ records",
         "data build", folder_with_bad_file("gz", "truncated")),
    Case("corrupt_gz_fails_naming_it", BUILD, r"src/b\.jsonl\.gz: corrupt gzip stream", "data build",
         folder_with_bad_file("gz", "corrupt")),
    Case("corrupt_zst_fails_naming_it", BUILD, r"src/b\.jsonl\.zst: corrupt zstd stream", "data build",
         folder_with_bad_file("zst", "corrupt")),
    Case("truncated_zst_skipped_whole_when_asked", (*BUILD, "--skip-bad-files"), None, "data build",
         folder_with_bad_file("zst", "truncated"), documents=20, changes=("ds",),
         says=r"skipped 1 damaged file\(s\) whole \(\S*src/b\.jsonl\.zst: truncated zstd stream\); listed in \S*"
              r"ds/build\.json under errors\.skipped_files"),
    Case("record_without_text_field_skipped_and_counted", BUILD, None, "data build",
         one_jsonl(GOOD + b'{"id": 7}\n'), documents=30, changes=("ds",),
         says=r"skipped 1 malformed record\(s\) \(1 no text field 'text'\); listed in \S*ds/build\.json"),
    Case("record_without_text_field_fails_under_strict", (*BUILD, "--strict"),
         r"a\.jsonl:31: no text field 'text' \(keys: id\); drop --strict", "data build",
         one_jsonl(GOOD + b'{"id": 7}\n')),
    Case("malformed_json_skipped_and_counted", BUILD, None, "data build",
         one_jsonl(GOOD + b'{"text": "cut here\n'), documents=30, changes=("ds",),
         says=r"skipped 1 malformed record\(s\) \(1 malformed JSON\)"),
    Case("malformed_json_fails_under_strict", (*BUILD, "--strict"), r"a\.jsonl:31: malformed JSON", "data build",
         one_jsonl(GOOD + b'{"text": "cut here\n')),
    Case("text_field_not_a_string_skipped", BUILD, None, "data build",
         one_jsonl(GOOD + b'{"text": 42}\n{"text": null}\n'), documents=30, changes=("ds",),
         says=r"skipped 2 malformed record\(s\) \(2 text field 'text' is not a string\)"),
    Case("utf16_jsonl_fails", BUILD, r"a\.jsonl: encoded as UTF-16; expected UTF-8", "data build",
         one_jsonl(GOOD.decode().encode("utf-16"))),
    Case("parquet_without_the_text_column_fails", BUILD, r"p\.parquet: no text column 'text' \(columns: body\)",
         "data build", parquet_file({"body": texts(5)})),
    Case("parquet_nulls_skipped_and_counted", BUILD, None, "data build",
         parquet_file({"text": [*texts(30), None, None]}), documents=30, changes=("ds",),
         says=r"skipped 2 malformed record\(s\) \(2 null text in column 'text'\)"),
    Case("truncated_parquet_fails", BUILD, r"p\.parquet: not a readable Parquet file", "data build",
         parquet_file({"text": texts(30)}, truncate=True)),
    Case("latin1_text_file_replaced_and_counted", BUILD, None, "data build",
         text_folder("Caf\xe9 cr\xe8me, a latin-1 page. ".encode("latin-1") * 20), documents=11, changes=("ds",),
         says=r"replaced invalid UTF-8 with U\+FFFD in 1 document\(s\); listed in \S*ds/build\.json"),
    Case("binary_file_in_text_folder_skipped", BUILD, None, "data build",
         text_folder(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 10), documents=10, changes=("ds",),
         says=r"skipped 1 malformed record\(s\) \(1 binary file \(NUL bytes\)\)"),
    Case("empty_file_among_good_ones_said", BUILD, None, "data build",
         both(files({"src/a.jsonl": GOOD, "src/empty.jsonl": b""}),
              lambda f, s: build_yaml(f, jsonl_source("src")) or {}),
         documents=30, changes=("ds",), says=r"1 empty file\(s\) gave no documents; listed in \S*ds/build\.json"),
    Case("source_of_only_an_empty_file_fails", BUILD, r"source web:\S*empty\.jsonl: empty \(no documents in",
         "data build", one_jsonl(b"", name="empty.jsonl")),
    Case("source_path_missing_fails", BUILD, r"source web:\S*nothere\.jsonl: path \S*nothere\.jsonl does not exist",
         "data build", lambda f, s: build_yaml(f, jsonl_source("nothere.jsonl")) or {}),
    Case("source_path_on_object_storage_fails_naming_the_field", BUILD,
         r"build\.yaml: sources\[0\]\.path: 's3://corpus/web/\*\.jsonl' is on object storage, which a build does "
         "not read its sources from yet", "data build",
         lambda f, s: build_yaml(f, jsonl_source("s3://corpus/web/*.jsonl")) or {}),
    Case("every_record_without_text_field_fails_saying_why", BUILD,
         r"empty \(no documents in \S*a\.jsonl\) \(2 skipped; the last: \S*a\.jsonl:2: no text field 'text' "
         r"\(keys: body, id\)\)", "data build", one_jsonl(b'{"body": "x", "id": 1}\n{"body": "y", "id": 2}\n')),
    # --- data build: configs, overrides, paths -----------------------------------------------------
    Case("config_not_yaml", BUILD, r"build\.yaml: not valid YAML", "data build",
         files({"build.yaml": "sources: [\n"})),
    Case("config_missing", BUILD, r"build\.yaml: config file not found", "data build"),
    Case("override_unknown_key", build_with("tokenizer.vocab=300"),
         r"tokenizer\.vocab: unknown key; did you mean 'vocab_size'\?", "data build", one_jsonl(GOOD)),
    Case("override_bad_value", build_with("tokenizer.vocab_size=lots"),
         r"tokenizer\.vocab_size='lots': expected an integer", "data build", one_jsonl(GOOD)),
    Case("nested_source_field_named_in_full", build_with("sources=[{path: a.jsonl, max_bytes: -1}]"),
         r"sources\[0\]\.max_bytes=-1: expected an integer >= 0", "data build", one_jsonl(GOOD)),
    Case("output_is_a_file", ("data", "build", "build.yaml", "--out", "afile", "--quiet"),
         r"afile: is a file; expected a folder", "data build", a_file),
    Case("output_in_read_only_folder", ("data", "build", "build.yaml", "--out", "ro/ds", "--quiet"),
         r"ro/ds: permission denied; expected ro to be writable by this user", "data build", read_only_folder,
         read_only=("ro",)),
    Case("report_of_a_folder_that_is_no_dataset", ("data", "report", "afile_dir"),
         r"afile_dir: not a built dataset \(no manifest\.json\)", "data report", files({"afile_dir/x": b""})),
    # --- train: configs, overrides, data -----------------------------------------------------------
    Case("train_negative_mixture_weight_named_in_full", (*TRAIN, "data.mixture.weights.code=-1", "--lab", "lab"),
         r"data\.mixture\.weights\.code=-1\.0: expected a weight >= 0", "train"),
    Case("train_mixture_names_unknown_domain", (*TRAIN, "data.mixture.weights.poetry=1", "--lab", "lab"),
         r"unknown domain 'poetry'", "train"),
    Case("train_on_a_truncated_shard", (*TRAIN, "data.path=data", "--lab", "lab"),
         r"data/shards/code/train\.bin: 1001 bytes, the manifest says \d+", "train", damaged_dataset(truncate_shard)),
    Case("train_on_a_damaged_manifest", (*TRAIN, "data.path=data", "--lab", "lab"),
         r"data/manifest\.json: not valid JSON", "train",
         damaged_dataset(lambda d: (d / MANIFEST_FILE).write_text('{"domains": '))),
    Case("train_on_an_interrupted_build", (*TRAIN, "data.path=ds", "--lab", "lab"),
         r"ds: not a built dataset \(no manifest\.json\)", "train", killed_build),
    Case("train_lab_is_a_file", (*TRAIN, "--lab", "afile"), r"afile: is a file; expected a folder", "train", a_file),
    Case("train_lab_read_only", (*TRAIN, "--lab", "ro"), r"ro\S*: permission denied; expected ro to be writable",
         "train", read_only_folder, read_only=("ro",)),
    # --- train: runs, checkpoints, resume, fork ----------------------------------------------------
    Case("resume_on_read_only_media", (*TRAIN, "--run-dir", "run", "--resume"),
         r"run/step\.json: permission denied; expected run\S* to be writable by this user", "train", copy_of_run(),
         read_only=("run",)),
    Case("resume_from_read_only_media", (*TRAIN, "--run-dir", "run", "--resume"),
         r"run/step\.json: read-only file system; expected writable storage",
         "train", copy_of_run(into="run.src"), media="run"),
    Case("data_build_onto_read_only_media", ("data", "build", "build.yaml", "--out", "media/ds", "--quiet"),
         r"media/ds: read-only file system; expected writable storage", "data build",
         both(read_only_folder, files({"media.src/keep": b""})), media="media"),
    Case("resume_past_a_truncated_checkpoint", (*TRAIN, "--run-dir", "run", "--resume"), None, "train",
         damaged_run(truncate_newest_checkpoint), changes=("run",)),
    Case("resume_with_a_damaged_run_record", (*TRAIN, "--run-dir", "run", "--resume"),
         r"run/run\.json: not valid JSON", "train", damaged_run(lambda r: (r / "run.json").write_text("{"))),
    Case("resume_a_store_that_is_not_sqlite", (*TRAIN, "--run-dir", "run", "--resume"),
         r"run/metrics\.db: file is not a database", "train",
         damaged_run(lambda r: (r / "metrics.db").write_bytes(b"\x00garbage" * 600)), changes=("run/step.json",)),
    Case("fork_of_an_unknown_run", ("train", "--fork", "nope@1", "--lab", "lab"), r"run 'nope': no run store",
         "train"),
    # --- serve, publish, note, run, ladder, demo ---------------------------------------------------
    Case("serve_port_too_large", ("serve", "--port", "70000"), r"port 70000: expected a port number from 0 to 65535",
         "serve"),
    Case("serve_port_negative", ("serve", "--port", "-1"), r"port -1: expected a port number", "serve"),
    Case("serve_refresh_not_positive", ("serve", "--every", "0"), r"--every 0\.0: expected seconds > 0", "serve"),
    Case("serve_lab_is_a_file", ("serve", "--lab", "afile", "--port", "0"), r"--lab afile: is a file; expected a lab",
         "serve", a_file),
    Case("serve_on_a_busy_port", ("serve", "--lab", "{S}", "--port", "{port}"),
         r"cannot serve on 127\.0\.0\.1:\d+ \(Address already in use\); expected a free port", "serve", busy_port,
         stdout_lacks="http://"),
    Case("publish_lab_missing", ("publish", "--lab", "nothere", "--out", "site"), r"--lab nothere: no such folder",
         "publish"),
    Case("publish_into_the_lab", ("publish", "--lab", "lab", "--out", "lab"), r"--out lab: must not be the lab root",
         "publish", copy_of_run(finished=True, into="lab/run")),
    Case("publish_into_read_only_folder", ("publish", "--lab", "lab", "--out", "ro/site"),
         r"ro/site: permission denied; expected ro to be writable", "publish",
         both(copy_of_run(finished=True, into="lab/run"), read_only_folder), read_only=("ro",)),
    Case("note_on_unknown_run", ("note", "nope", "hello", "--lab", "lab"), r"run 'nope': no run store", "note"),
    Case("note_empty", ("note", "{S}/run", "  "), r"note text is empty", "note"),
    Case("note_on_read_only_run", ("note", "run", "looked at it", "--lab", "lab"),
         r"lab/run/metrics\.db: cannot open the database for writing", "note",
         copy_of_run(finished=True, into="lab/run"), read_only=("lab/run",)),
    Case("run_missing_experiment_file", ("run", "nothere.py", "--lab", "lab"),
         r"nothere\.py: experiment file not found", "run"),
    Case("run_experiment_with_syntax_error", ("run", "broken.py", "--lab", "lab"), r"broken\.py:1: invalid syntax",
         "run", files({"broken.py": "def steps(:\n"})),
    Case("run_into_read_only_lab", ("run", "hello", "--lab", "ro"), r"ro/\S+: permission denied; expected ro",
         "run", read_only_folder, read_only=("ro",)),
    Case("ladder_fit_bad_asymptote", ("ladder", "fit", "--L-inf", "abc", "--lab", "lab"),
         r"--L-inf='abc': expected a number", "ladder fit"),
    Case("ladder_fit_without_rungs", ("ladder", "fit", "--L-inf", "free", "--lab", "lab"),
         r"no rung runs given and none found under lab", "ladder fit"),
    Case("ladder_fit_into_read_only_folder",
         ("ladder", "fit", "--L-inf", "2.0", "--lab", "lab", "--bootstrap", "20", "--out", "ro/fit"),
         r"ro/fit\S*: permission denied; expected ro to be writable", "ladder fit", rung_runs, read_only=("ro",)),
    Case("demo_lab_is_a_file", ("demo", "--quick", "--no-serve", "--lab", "afile"),
         r"afile: is a file; expected a folder", "demo", a_file),
    Case("sft_on_a_file_too_small_to_hold_any_out", ("sft", "{S}/run", "chats.jsonl", "--steps", "1", "--lab", "lab"),
         r"no held-out conversations: 4 conversations are too few to hold any out \(at most 20% are\); give --heldout",
         "sft", files({"chats.jsonl": "".join(json.dumps(c) + "\n" for c in CHATS)})),
    Case("dpo_skips_a_pair_whose_chosen_is_its_rejected_and_says_so",
         ("dpo", "{S}/run", "pairs.jsonl", "--steps", "1", "--seq-len", "64", "train.sample_max_new_tokens=4",
          "--lab", "lab"), None, "dpo", files({"pairs.jsonl": "".join(json.dumps(p) + "\n" for p in PAIRS)}),
         says=r"\[pairs\] skipped 1 bad record\(s\); the first: \S*pairs\.jsonl:3: chosen and rejected are the same "
              r"reply \(all listed in \S*report\.json under bad_records\)"),
    Case("unknown_command", ("frobnicate",), r"argument COMMAND: invalid choice: 'frobnicate'", ""),
]


# --- running -----------------------------------------------------------------------------------------


def snapshot(*roots: Path) -> dict[str, str]:
    """sha256 of every file under ``roots`` (symlinks and sockets aside)."""
    hashes = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                hashes[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


def trusted_outputs(folder: Path) -> set[str]:
    """Files under ``folder`` a later step would trust (see :data:`TRUSTED`)."""
    found = set()
    for path in folder.rglob("*"):
        if path.name in TRUSTED and path.is_file():
            found.add(str(path))
        elif path.name == STEP_RECORD and json.loads(path.read_text() or "{}").get("status") == "succeeded":
            found.add(str(path))
    return found


def unprivileged_prefix() -> list[str] | None:
    """The command prefix under which file permissions bind (None: this machine cannot do it)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        return None
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]


MEDIA_SCRIPT = 'mount -t tmpfs none "$1" && cp -a "$1.src/." "$1" && mount -o remount,ro "$1" && shift && exec "$@"'


def read_only_media_prefix(mountpoint: Path) -> list[str]:
    """Run the command in a mount namespace where ``mountpoint`` holds a read-only copy of ``<mountpoint>.src``."""
    return ["unshare", "--mount", "sh", "-c", MEDIA_SCRIPT, "sh", str(mountpoint)]


def can_mount_read_only_media() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", "mount -t tmpfs none /mnt && mount -o remount,ro /mnt"],
                           capture_output=True)
    return probe.returncode == 0


def run_case(case: Case, folder: Path, shared: Path, prefix: list[str] | None) -> Outcome:
    outcome = Outcome(folder=folder)
    keep: list = []
    try:
        folder.mkdir(parents=True)
        values = case.setup(folder, shared) if case.setup else {}
        keep = values.pop("keep", [])
        for name in case.read_only:
            (folder / name).chmod(0o555)
        args = list(case.args)
        for key, value in {"S": shared, **values}.items():
            args = [a.replace("{" + key + "}", str(value)) for a in args]
        if case.media:
            (folder / case.media).mkdir()
            prefix = read_only_media_prefix(folder / case.media)
        command = [*(prefix if case.read_only or case.media else []), sys.executable, "-m", "glasslab", *args]
        protected = {k: v for k, v in snapshot(folder, shared).items()
                     if not any(Path(k).is_relative_to(folder / c) for c in case.changes)}
        trusted_before = trusted_outputs(folder)
        started = time.monotonic()
        done = subprocess.run(command, cwd=folder, env=subprocess_env(), capture_output=True, text=True,
                              timeout=240)
        outcome.seconds = time.monotonic() - started
        outcome.returncode, outcome.stdout, outcome.stderr = done.returncode, done.stdout, done.stderr
        after = snapshot(folder, shared)
        outcome.changed = sorted(k for k, v in protected.items() if after.get(k) != v)
        outcome.new_trusted = sorted(trusted_outputs(folder) - trusted_before)
    except Exception as exc:  # noqa: BLE001 - reported by the case's own test
        outcome.problem = f"{type(exc).__name__}: {exc}"
    finally:
        for obj in keep:
            obj.close()
        for name in case.read_only:
            if (folder / name).exists():
                (folder / name).chmod(0o755)
    return outcome


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """A tiny dataset, its run config and a finished 2-step run with checkpoints at steps 0, 1 and 2."""
    root = tmp_path_factory.mktemp("shared")
    build_tiny_dataset(root)
    config = tiny_run_config(root / "data", max_steps=2, checkpoint_interval=1, sample_prompts=[])
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    done = run_cli("train", str(root / "run.yaml"), "--run-dir", str(root / "run"))
    assert done.returncode == 0, done.stderr[-3000:]
    return root


@pytest.fixture(scope="module")
def outcomes(shared, tmp_path_factory, request) -> dict[str, Outcome]:
    """Every selected case run once, in parallel (``-k`` runs only the cases it selects)."""
    cases_root = tmp_path_factory.mktemp("cases")
    prefix = unprivileged_prefix()
    selected = {item.callspec.params["case"].name for item in request.session.items  # this file's cases only
                if hasattr(item, "callspec") and isinstance(item.callspec.params.get("case"), Case)}
    media = can_mount_read_only_media()
    runnable = [c for c in CASES if c.name in selected and not (c.read_only and prefix is None)
                and not (c.media and not media)]
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {c.name: pool.submit(run_case, c, cases_root / c.name, shared, prefix) for c in runnable}
        return {name: future.result() for name, future in futures.items()}


def test_the_table_is_large_and_names_are_unique():
    assert len(CASES) >= 30 and len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case: Case, outcomes: dict[str, Outcome]):
    if case.name not in outcomes:
        pytest.skip("needs read-only media (root, unshare and tmpfs)" if case.media else
                    "runs unprivileged, which needs setpriv when the tests run as root")
    out = outcomes[case.name]
    assert not out.problem, out.problem
    assert "Traceback" not in out.stderr + out.stdout, out.stderr[-3000:]
    assert not out.changed, f"inputs changed: {out.changed}"
    if case.error is None:
        assert out.returncode == 0, out.stderr[-3000:]
        if case.says:
            assert re.search(case.says, out.stderr), out.stderr
        if case.documents is not None:
            record = json.loads((out.folder / "ds" / BUILD_RECORD).read_text())
            funnel = {stage["stage"]: stage["documents"] for stage in record["funnel"]}
            assert funnel["raw"] == case.documents
            manifest = json.loads((out.folder / "ds" / MANIFEST_FILE).read_text())
            kept = sum(split["documents"] for splits in manifest["domains"].values() for split in splits.values())
            assert kept == funnel["near_dedup"]  # every document the funnel kept is in the shards
        return
    assert out.returncode == 2, (out.returncode, out.stderr[-3000:])
    # Progress lines (an executor's plan) may come first; the error is one line, the last, and alone.
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    prefix = f"glasslab {case.command}: error: " if case.command else "glasslab: error: "
    errors = [line for line in lines if re.search(r"error|exception|Traceback", line, re.IGNORECASE)]
    assert errors == lines[-1:] and lines[-1].startswith(prefix), out.stderr[-3000:]
    assert re.search(case.error, lines[-1][len(prefix):]), lines[-1]
    assert not out.new_trusted, f"left output a later step would trust: {out.new_trusted}"
    if case.command == "data build":
        assert not (out.folder / "ds").exists(), "a failed build left its output folder"
    if case.stdout_lacks:
        assert case.stdout_lacks not in out.stdout
