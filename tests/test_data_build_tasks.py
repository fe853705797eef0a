"""The build as tasks: the same dataset (manifest hash, report) with 1 or 3 workers, cut into many tasks or
few, killed with SIGKILL and resumed, or with a worker killed mid-task; input read by byte ranges; caps in
canonical order; the live progress; an unreachable Ray address. (Ray itself: ``test_lab_ray.py``.)"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cli_runner import run_cli, subprocess_env
from data_helpers import small_build_config, topic_texts, write_jsonl
from glasslab.config import to_dict
from glasslab.data import inputs as inputs_module
from glasslab.data.build import WORK_PREFIX, build_dataset
from glasslab.data.config import SourceConfig
from glasslab.data.filters import PROSE_FILTERS
from glasslab.data.provenance import document_provenance
from glasslab.data.runner import KILL_TASK_ENV
from glasslab.data.shards import manifest_hash
from glasslab.data.sources import InputErrors, read_source
from glasslab.layout import BUILD_PROGRESS, BUILD_RECORD, REPORT_FILE


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The small build with one worker (in this process): what every other way must give, byte for byte."""
    tmp = tmp_path_factory.mktemp("reference")
    cfg = small_build_config(tmp, progress=False)
    out = build_dataset(cfg, tmp / "ds")
    return tmp, cfg, manifest_hash(out), (out / REPORT_FILE).read_bytes()


def test_three_workers_and_small_tasks_build_the_same_dataset(reference, tmp_path, monkeypatch):
    tmp, cfg, expected, report = reference
    three = build_dataset(dataclasses.replace(cfg, num_workers=3), tmp_path / "three")
    assert manifest_hash(three) == expected and (three / REPORT_FILE).read_bytes() == report
    record = json.loads((three / BUILD_RECORD).read_text())
    assert record["workers"] == 3 and record["backend"] == "local" and record["reruns"] == []
    # Every task that ran is accounted, with the CPU seconds it used in its worker process (not the driver's).
    accounted = {s["stage"]: s for s in record["stages"]}
    # The n-gram counts run beside the tokenizer's one task: they start before it ends.
    tokenizer, ngrams = accounted["tokenizer"], accounted["ngrams"]
    assert tokenizer["tasks"] == 1 and ngrams["started"] < tokenizer["started"] + tokenizer["seconds"]
    for stage in record["stages"]:
        assert len(stage["task_cpu_s"]) == stage["tasks"], stage["stage"]
        assert 0 <= stage["longest_task_s"] <= stage["seconds"] and stage["dispatch_s"] >= 0
        assert stage["driver_before_s"] >= stage["driver_before_cpu_s"] * 0.5 >= 0
    inline = {s["stage"]: s for s in json.loads((tmp / "ds" / BUILD_RECORD).read_text())["stages"]}
    for name in ("read", "tokenize"):  # the same work in the driver (1 worker) and in 3 workers: similar CPU
        assert 0.3 < accounted[name]["cpu_s"] / inline[name]["cpu_s"] < 3, (name, accounted[name], inline[name])
    assert sum(s["cpu_s"] for s in record["stages"]) > 0.05 and record["driver_after"]["cpu_s"] > 0
    # The read stage is a chain of blocks, each counting what came in and what went on to the next.
    blocks = {b["block"]: b for b in record["read_blocks"]}
    names = list(blocks)
    assert names == ["normalize", *(f"filter:{n}" for n in PROSE_FILTERS), "store", "digest", "minhash"]
    for before, after in zip(names, names[1:], strict=False):
        assert blocks[before]["documents_out"] == blocks[after]["documents_in"], (before, after)
    read = next(stage for stage in record["stages"] if stage["stage"] == "read")
    assert blocks["normalize"]["documents_in"] == read["documents_in"] > blocks["minhash"]["documents_out"] > 0
    for name, dropped in record["filters"].items():  # no source cap here: the funnel's drops are the blocks'
        assert blocks[f"filter:{name}"]["documents_in"] - blocks[f"filter:{name}"]["documents_out"] == dropped
    # Cut into ~16 KB byte ranges: every JSONL file is many tasks, each reading the lines that start in it.
    monkeypatch.setattr(inputs_module, "TASK_BYTES", 16_000)
    small = build_dataset(dataclasses.replace(cfg, num_workers=2), tmp_path / "small")
    stages = {s["stage"]: s for s in json.loads((small / BUILD_RECORD).read_text())["stages"]}
    assert stages["read"]["tasks"] > 20
    assert manifest_hash(small) == expected and (small / REPORT_FILE).read_bytes() == report
    last = len(topic_texts()[1::2])
    assert document_provenance(small, "beta", "train", 0)["line"] >= 1
    lines = [document_provenance(small, "beta", split, i)["line"] for split in ("train", "eval")
             for i in range(json.loads((small / "manifest.json").read_text())["domains"]["beta"][split]["documents"])]
    assert max(lines) <= last and len(set(lines)) == len(lines)


def test_caps_follow_the_canonical_order_across_tasks(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "a.jsonl", topic_texts())
    with open(path, "a") as out:
        out.write('{"text": broken}\n')  # past the cap: whether a task read it must not show
    capped = SourceConfig(domain="a", kind="jsonl", path=str(path), max_documents=40, max_bytes=150_000)
    serial = list(read_source(capped, InputErrors()))
    monkeypatch.setattr(inputs_module, "TASK_BYTES", 8_000)
    cfg = small_build_config(tmp_path, sources=(capped,), progress=False)
    out = build_dataset(dataclasses.replace(cfg, num_workers=2), tmp_path / "two")
    record = json.loads((out / BUILD_RECORD).read_text())
    assert record["funnel"][0] == {"stage": "raw", "documents": len(serial),
                                   "bytes": sum(len(t.encode()) for t in serial)}
    assert len(serial) < 40 and sum(len(t.encode()) for t in serial[:-1]) < 150_000  # the bytes cap cut it
    assert record["errors"]["malformed_count"] == 0
    # tasks past the cap were not read at all
    assert next(s for s in record["stages"] if s["stage"] == "read")["documents_in"] < len(topic_texts())
    one = build_dataset(cfg, tmp_path / "one")  # one worker: no task past the cap runs
    assert manifest_hash(one) == manifest_hash(out)
    assert (one / REPORT_FILE).read_bytes() == (out / REPORT_FILE).read_bytes()


def _kill_group(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)


def test_a_sigkilled_build_resumes_with_its_unfinished_tasks_and_builds_the_same(reference, tmp_path):
    tmp, cfg, expected, report = reference
    (tmp_path / "build.yaml").write_text(yaml.safe_dump(to_dict(dataclasses.replace(cfg, progress=True))))
    command = [sys.executable, "-m", "glasslab", "data", "build", "build.yaml", "--out", "ds", "--workers", "2"]
    build = subprocess.Popen(command, cwd=tmp_path, env=subprocess_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "ds").glob(f"{WORK_PREFIX}*/read/*/done.json")):
        assert build.poll() is None and time.monotonic() < deadline, "the build ended before it could be killed"
        time.sleep(0.01)
    _kill_group(build)
    work = list((tmp_path / "ds").glob(f"{WORK_PREFIX}*"))
    assert len(work) == 1 and not (tmp_path / "ds" / "manifest.json").exists()
    assert json.loads((tmp_path / "ds" / BUILD_PROGRESS).read_text())["status"] == "running"  # as it was left
    done = run_cli("data", "build", "build.yaml", "--out", "ds", "--workers", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "resuming in" in done.stderr and "reused" in done.stderr
    ds = tmp_path / "ds"
    assert manifest_hash(ds) == expected and (ds / REPORT_FILE).read_bytes() == report
    stages = {s["stage"]: s for s in json.loads((ds / BUILD_RECORD).read_text())["stages"]}
    assert stages["read"]["tasks_reused"] >= 1
    assert not work[0].exists() and not (ds / BUILD_PROGRESS).exists()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_the_pool_workers_of_a_sigkilled_build_end_with_it(reference, tmp_path):
    """Only the build's driver is killed (not its process group): its pool workers must not live on."""
    tmp, cfg, _, _ = reference
    (tmp_path / "build.yaml").write_text(yaml.safe_dump(to_dict(cfg)))
    command = [sys.executable, "-m", "glasslab", "data", "build", "build.yaml", "--out", "ds", "--workers", "2"]
    build = subprocess.Popen(command, cwd=tmp_path, env=subprocess_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (list((tmp_path / "ds").glob(f"{WORK_PREFIX}*/read/*/done.json")) and _children(build.pid)):
            assert build.poll() is None and time.monotonic() < deadline, "the build ended before it could be killed"
            time.sleep(0.01)
        workers = _children(build.pid)
        os.kill(build.pid, signal.SIGKILL)
        build.wait(timeout=60)
        deadline = time.monotonic() + 5
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in workers if _alive(pid)], f"pool workers {workers} outlived their build"
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever is left of its session: no test leaves one
            os.killpg(build.pid, signal.SIGKILL)


def test_a_worker_killed_mid_task_reruns_it_once_said_and_recorded(reference, tmp_path):
    tmp, cfg, expected, report = reference
    (tmp_path / "build.yaml").write_text(yaml.safe_dump(to_dict(cfg)))
    done = run_cli("data", "build", "build.yaml", "--out", "ds", "--workers", "2", cwd=tmp_path,
                   **{KILL_TASK_ENV: "read/000001"})
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "worker process died" in line]
    assert len(said) == 1 and "000001" in said[0], done.stderr
    ds = tmp_path / "ds"
    record = json.loads((ds / BUILD_RECORD).read_text())
    assert [r["stage"] for r in record["reruns"]] == ["read"] and "000001" in record["reruns"][0]["tasks"]
    assert manifest_hash(ds) == expected and (ds / REPORT_FILE).read_bytes() == report


def test_progress_lines_name_each_stage(reference, tmp_path):
    tmp, cfg, expected, _ = reference
    (tmp_path / "build.yaml").write_text(yaml.safe_dump(to_dict(dataclasses.replace(cfg, progress=True))))
    done = run_cli("data", "build", "build.yaml", "--out", "ds", "--workers", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # Each count says what it counts: near-dedup's stages count pairs and removals, not documents kept.
    counted = {"buckets": "candidate pairs", "verify": "pairs similar", "clusters": "near-duplicate docs to remove",
               "ngrams": "training docs scanned", "tokenizer": "docs sampled"}
    for stage in ("read", "exact", "buckets", "verify", "clusters", "survivors", "ngrams", "tokenizer", "tokenize",
                  "assemble"):
        label = counted.get(stage, "docs kept")
        assert any(line.startswith(f"[data build] {stage} ") and " tasks " in line and "MB/s" in line
                   and re.search(rf"MB/s  [\d,]+ {label}  in ", line) for line in done.stderr.splitlines()), \
            (stage, done.stderr)


class _Ref:
    """An object ref: hashable, and holding its task's result (None: its raylet died)."""

    def __init__(self, result: dict | None) -> None:
        self.result = result


class _InlineRay:
    """Ray's side of the pool, run in this process: each task executes when submitted; ``ray.get`` of the
    first task of ``fail_in`` raises what a lost raylet raises (a real raylet kill takes a cluster)."""

    def __init__(self, fail_in: str = "") -> None:
        self.fail_in = fail_in

    def remote(self, **options):
        return lambda fn: _InlineRemote(self, fn)

    def wait(self, refs, num_returns, timeout):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        import ray

        if ref.result is None:
            raise ray.exceptions.LocalRayletDiedError()
        return ref.result


class _InlineRemote:
    def __init__(self, ray: _InlineRay, fn) -> None:
        self.ray, self.fn = ray, fn

    def options(self, **options):
        return self

    def remote(self, fn, arg, folder, kill_mark):
        if self.ray.fail_in and f"/{self.ray.fail_in}/" in folder:
            return _Ref(None)
        return _Ref(self.fn(fn, arg, folder, kill_mark))


def test_ray_failing_mid_build_is_one_line_and_the_build_resumes_after(reference, tmp_path, monkeypatch, capsys):
    ray = pytest.importorskip("ray")
    from glasslab.cli import main as cli_main
    from glasslab.lab import pool_ray

    tmp, cfg, expected, report = reference
    (tmp_path / "build.yaml").write_text(yaml.safe_dump(to_dict(cfg)))
    fake = _InlineRay(fail_in="buckets")
    monkeypatch.setattr(pool_ray, "join_ray", lambda address, num_cpus, num_gpus: False)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2})
    for name in ("remote", "wait", "get"):
        monkeypatch.setattr(ray, name, getattr(fake, name))
    monkeypatch.chdir(tmp_path)
    command = ["data", "build", "build.yaml", "--out", "ds", "--backend", "ray", "--lab", str(tmp_path / "lab")]
    assert cli_main(command) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("glasslab data build: error: data build: Ray failed during "
                                                   "buckets (LocalRayletDiedError: The task's local raylet died"), lines
    assert "run the same build again to resume" in lines[0]
    assert list((tmp_path / "ds").glob(f"{WORK_PREFIX}*/read/*/done.json"))  # what was done is kept
    fake.fail_in = ""  # Ray is back
    assert cli_main(command) == 0, capsys.readouterr().err
    ds = tmp_path / "ds"
    stages = {s["stage"]: s for s in json.loads((ds / BUILD_RECORD).read_text())["stages"]}
    assert stages["read"]["tasks_reused"] == stages["read"]["tasks"] >= 1
    assert manifest_hash(ds) == expected and (ds / REPORT_FILE).read_bytes() == report


def test_provenance_names_the_text_file_and_the_parquet_row(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from glasslab.data.normalize import normalize
    from glasslab.data.shards import open_shard
    from glasslab.data.tokenizer import load_tokenizer

    texts = topic_texts()
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    for i, text in enumerate(texts[:12]):
        (tmp_path / "docs" / ("sub" if i % 2 else "") / f"{i:02d}.txt").write_text(text)
    pq.write_table(pa.table({"body": texts[20:60]}), tmp_path / "p.parquet", row_group_size=4)
    monkeypatch.setattr(inputs_module, "TASK_BYTES", 20_000)  # several row-group ranges, several file groups
    cfg = small_build_config(tmp_path, sources=(
        SourceConfig(domain="files", kind="text", path=str(tmp_path / "docs")),
        SourceConfig(domain="rows", kind="parquet", path=str(tmp_path / "p.parquet"), text_field="body")),
        progress=False, num_workers=2)
    ds = build_dataset(cfg, tmp_path / "ds")
    tokenizer = load_tokenizer(ds)
    for domain in ("files", "rows"):
        shard = open_shard(ds, domain, "train")
        for i in range(len(shard.ends)):
            text = tokenizer.decode(shard.document(i)[:-1].tolist())
            where = document_provenance(ds, domain, "train", i)
            if domain == "files":
                assert where["kind"] == "text" and normalize((tmp_path / "docs" / where["file"]).read_text()) == text
            else:
                assert where["file"] == "p.parquet" and normalize(texts[20 + where["row"]]) == text
