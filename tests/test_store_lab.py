"""The lab on object storage (issue 44), against moto's S3-compatible server started here: the store
honours conditional creates, two nodes racing for a step get one lease, a URL the lab cannot use is one
line and exit 2, a run SIGKILLed on one node resumes on another (its own local working folder) bit
for bit the same as the uninterrupted run on a local folder, and the demo's chain on a Ray cluster of two
nodes that share no disk, one of them killed mid-hero, ends as it does on a local folder."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from cli_runner import run_cli, start_cli, subprocess_env
from glasslab.cli import main as cli_main
from glasslab.data.config import DataConfig
from glasslab.data.loader import Loader
from glasslab.data.mixture import MixtureConfig
from glasslab.data.shards import open_shard, read_manifest
from glasslab.errors import UserError
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.run_page import run_page
from glasslab.store import ranges
from glasslab.store.lease import RootLease
from glasslab.store.mirror import Mirror, lab_snapshot, lab_workspace
from glasslab.store.url import MissingObject, open_root
from glasslab.track import RunReader
from glasslab.train import checkpoint as ckpt
from s3_server import CREDENTIALS, s3_server
from train_data import build_tiny_dataset, tiny_run_config


@pytest.fixture(scope="module")
def endpoint():
    with s3_server(buckets=("lab",)) as url:
        yield url


def _record(**extra):
    return {"host": "node", "pid": None, "heartbeat": time.time(), **extra}


def test_the_server_honours_if_none_match_and_one_racer_gets_the_lease(endpoint):
    root = open_root("s3://lab/leases")
    assert root.put("k", b"first", if_absent=True)
    assert not root.put("k", b"second", if_absent=True)  # a store that ignored If-None-Match would say True
    assert root.get("k") == b"first"

    wins, start = [], threading.Barrier(6)

    def race(owner: str) -> None:
        lease = RootLease(root, "step-a", owner, lease_s=60)
        start.wait()
        if lease.acquire(_record()):
            wins.append(owner)

    threads = [threading.Thread(target=race, args=(f"node{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    holder = RootLease(root, "step-a", "other", lease_s=60).holder()
    assert holder is not None and holder["owner"] == wins[0]


def test_a_stale_lease_is_taken_over_once_and_its_old_holder_learns_it_lost(endpoint):
    root = open_root("s3://lab/stale")
    old = RootLease(root, "step-b", "old", lease_s=0.5)
    assert old.acquire(_record())
    assert not RootLease(root, "step-b", "early", lease_s=0.5).acquire(_record())  # live: refused
    time.sleep(0.6)
    racers = [RootLease(root, "step-b", f"new{i}", lease_s=0.5) for i in range(2)]
    assert [r.acquire(_record()) for r in racers] == [True, False]  # the second sees a live holder
    assert not old.refresh(_record())  # the suspended holder stops writing
    racers[0].release()
    assert RootLease(root, "step-b", "next", lease_s=0.5).acquire(_record())  # released: free at once


def _unanswering_endpoint() -> tuple[socket.socket, str]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepts connections (the kernel's backlog) and never answers a request
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize("case", ["no bucket", "no credentials", "times out", "unknown scheme"])
def test_a_url_the_lab_cannot_use_is_one_line_and_nothing_local(case, endpoint, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GLASSLAB_WORK", str(tmp_path / "work"))
    url, expected = "s3://lab/x", ""
    if case == "no bucket":
        url, expected = "s3://missing-bucket/x", "bucket does not exist"
    elif case == "no credentials":
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(key)
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        expected = "no credentials"
    elif case == "times out":
        listener, silent = _unanswering_endpoint()
        monkeypatch.setenv("AWS_ENDPOINT_URL", silent)
        monkeypatch.setenv("GLASSLAB_STORE_TIMEOUT_S", "0.3")
        monkeypatch.setenv("GLASSLAB_STORE_ATTEMPTS", "1")
        expected = "timed out"
    else:
        url, expected = "ftp://host/x", "unknown lab root scheme"
    started = time.monotonic()
    assert _exit_status(["run", "hello", "--lab", url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and url in err and expected in err, err
    assert list(tmp_path.iterdir()) == []
    assert time.monotonic() - started < 20
    if case == "times out":
        listener.close()


def _exit_status(argv: list[str]) -> int:
    """The command's exit status, whether it returns it or argparse exits with it."""
    try:
        return cli_main(argv)
    except SystemExit as exc:
        return int(exc.code)


def _root_checkpoints(fs, run: str) -> list[int]:
    fs.invalidate_cache()
    found = fs.glob(f"lab/killed/{run}/checkpoints/step-*/manifest.json")
    return sorted(int(p.split("/")[-2][5:]) for p in found)


def test_sigkill_on_one_node_resumes_on_another_bit_identical_to_a_local_run(endpoint, tmp_path):
    import s3fs

    dataset = build_tiny_dataset(tmp_path / "data")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_run_config(dataset, moe=True, max_steps=32, checkpoint_interval=4)))
    ref = run_cli("train", str(config), "--lab", str(tmp_path / "local"))
    assert ref.returncode == 0, ref.stderr[-3000:]
    (ref_dir,) = [p for p in (tmp_path / "local").iterdir() if (p / "run.json").is_file()]

    fs = s3fs.S3FileSystem()
    proc = start_cli("train", str(config), "--lab", "s3://lab/killed", GLASSLAB_WORK=str(tmp_path / "node-a"))
    deadline = time.monotonic() + 120
    while not [s for s in _root_checkpoints(fs, ref_dir.name) if s >= 8] and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no handler runs, nothing more is pushed
    proc.wait()
    on_root = _root_checkpoints(fs, ref_dir.name)
    assert on_root and on_root[-1] < 32 and not fs.exists(f"lab/killed/{ref_dir.name}/result.json")

    resumed = run_cli("train", str(config), "--lab", "s3://lab/killed", GLASSLAB_WORK=str(tmp_path / "node-b"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from step " in resumed.stderr
    run_b = tmp_path / "node-b" / ref_dir.name
    assert fs.exists(f"lab/killed/{ref_dir.name}/result.json")  # the finished run is on the root
    with RunReader(ref_dir) as a, RunReader(run_b) as b:  # the run store came back from the root
        assert b.scalars("train/loss") == a.scalars("train/loss")  # bit for bit, every step
        assert any(e["kind"] == "resume" for e in b.events())
    timeline = run_page(Lab(tmp_path / "node-b"), ref_dir.name)["events"]  # the run page's: node_lost, resume
    (lost,) = [e for e in timeline if e["kind"] == "node_lost"]
    assert socket.gethostname() in lost["title"] and "last heartbeat" in lost["body"], lost
    (resumed,) = [e for e in timeline if e["kind"] == "resume"]
    assert resumed["title"] == f"resumed at step {on_root[-1]}" and resumed["time"] > lost["time"]
    fs.invalidate_cache()
    assert len(fs.glob("lab/killed/events/*.db")) == 2  # each node's segment of the lab's log, side by side
    ref_weights = ckpt.load_checkpoint(ckpt.list_checkpoints(ref_dir)[-1][1])["model"]
    weights = ckpt.load_checkpoint(ckpt.list_checkpoints(run_b)[-1][1])["model"]
    assert all(torch.equal(ref_weights[k], weights[k]) for k in ref_weights)
    assert not Path(tmp_path / "node-b" / ref_dir.name / ".lock").exists()
    secrets = [CREDENTIALS[k].encode() for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")]
    written = [fs.cat_file(key) for key in fs.find("lab/killed")]  # records, run store, checkpoints, events
    written += [p.read_bytes() for p in (tmp_path / "node-b").rglob("*") if p.is_file()]
    assert written and not any(secret in blob for blob in written for secret in secrets)


def test_an_experiment_on_the_root_is_found_done_by_another_node(endpoint, tmp_path, monkeypatch, capsys):
    import s3fs

    monkeypatch.setenv("GLASSLAB_WORK", str(tmp_path / "node-a"))
    assert cli_main(["run", "hello", "--lab", "s3://lab/exp"]) == 0
    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    records = fs.glob("lab/exp/*/step.json")
    assert len(records) == 2 and all(b'"succeeded"' in fs.cat_file(r) for r in records)
    assert not fs.glob("lab/exp/*/.lock") and len(fs.glob("lab/exp/events/*.db")) == 1
    capsys.readouterr()
    monkeypatch.setenv("GLASSLAB_WORK", str(tmp_path / "node-b"))  # nothing local: all from the root
    assert cli_main(["run", "hello", "--lab", "s3://lab/exp"]) == 0
    assert "nothing to run: 2 steps cached" in capsys.readouterr().err
    monkeypatch.setenv("GLASSLAB_WORK", str(tmp_path / "node-c"))  # publish reads a snapshot of the root
    assert cli_main(["publish", "--lab", "s3://lab/exp", "--out", str(tmp_path / "site")]) == 0
    site = [p for p in (tmp_path / "site").rglob("*") if p.is_file()]
    assert (tmp_path / "site" / "index.html") in site
    assert any("greet-" in p.read_text(errors="ignore") for p in site if p.suffix in (".json", ".js", ".html"))
    assert _exit_status(["publish", "--lab", "s3://lab/exp", "--out", str(tmp_path / "s2"), "--watch"]) == 2


def test_two_nodes_racing_for_one_run_train_it_once(endpoint, tmp_path):
    dataset = build_tiny_dataset(tmp_path / "data")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_run_config(dataset, max_steps=8, checkpoint_interval=4)))
    nodes = [
        start_cli("train", str(config), "--lab", "s3://lab/race", GLASSLAB_WORK=str(tmp_path / f"node-{i}"))
        for i in range(2)
    ]
    outs = [(proc.wait(timeout=240), *proc.communicate()) for proc in nodes]
    assert [rc for rc, _, _ in outs] == [0, 0], [err[-2000:] for _, _, err in outs]
    lines = sorted(out.strip().splitlines()[-1].split(": ", 1)[1] for _, out, _ in outs)
    assert lines[0].startswith("finished at step 8") and lines[1].startswith("finished before (cached) at step 8")
    (run,) = [p.parent for p in (tmp_path / "node-0").glob("*/run.json")]
    with RunReader(run) as reader:  # trained once: one attempt of every step, no resume
        assert not any(e["kind"] == "resume" for e in reader.events())


def test_a_data_build_on_the_root_lands_whole_and_is_cached_for_another_node(endpoint, tmp_path, monkeypatch, capsys):
    import s3fs

    from glasslab import config as configs
    from train_data import tiny_build_config

    build = tmp_path / "build.yaml"
    build.write_text(yaml.safe_dump(configs.to_dict(tiny_build_config())))
    monkeypatch.setenv("GLASSLAB_WORK", str(tmp_path / "node-a"))
    assert cli_main(["data", "build", str(build), "--lab", "s3://lab/data", "--quiet"]) == 0
    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    (manifest,) = fs.glob("lab/data/data-*/manifest.json")
    local = tmp_path / "node-a" / manifest.split("/")[-2]
    assert fs.cat_file(manifest) == (local / "manifest.json").read_bytes()
    folder = manifest.rsplit("/", 1)[0]
    on_root = {key[len(folder) + 1 :] for key in fs.find(folder) if "/.lease-" not in key}
    here = {p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file() and ".lock" not in p.name}
    assert on_root == here  # every file of the build, and nothing node-local
    capsys.readouterr()
    monkeypatch.setenv("GLASSLAB_WORK", str(tmp_path / "node-b"))
    assert cli_main(["data", "build", str(build), "--lab", "s3://lab/data", "--quiet"]) == 0
    assert "built before (cached)" in capsys.readouterr().err
    assert _exit_status(["data", "build", str(build), "--lab", "s3://lab/data", "--out", str(tmp_path / "d")]) == 2


NODE_WRITES = """
import sys, time
from glasslab.lab import registry
from glasslab.lab.card import ExperimentCard, add_conclusion, record_run
from glasslab.store.mirror import lab_workspace
from glasslab.track import log_lab_event

node = sys.argv[1]
with lab_workspace("s3://lab/shared") as lab:
    registry.register(lab, f"{node}/hero/loss", metric="eval/macro/loss", point=3.0, low=2.9, high=3.1,
                      target=f"{node}-hero", source=f"{node}-fit")
    log_lab_event(lab, "note", f"{node}-hero", f"{node} was here")
    record_run(lab, "shared", ExperimentCard("shared", f"asked by {node}"), {"hero": f"{node}-hero"})
    add_conclusion(lab, "shared", f"{node} concludes")
    print("registered", flush=True)
    if node == "a":
        time.sleep(600)  # killed here: nothing more is pushed, no command end
"""


def test_two_nodes_register_and_log_into_one_root_and_a_killed_node_loses_nothing(endpoint, tmp_path, monkeypatch):
    from glasslab.lab import registry
    from glasslab.lab.card import card_versions, conclusions, experiment_runs
    from glasslab.track import read_lab_events

    old = {"name": "old/hero/loss", "metric": "eval/macro/loss", "point": 3.5, "low": 3.4, "high": 3.6,
           "target": "old-hero", "source": "old-fit", "level": 0.9, "registered_at": "2026-01-01T00:00:00Z", "seq": 1}
    open_root("s3://lab/shared").put("predictions.jsonl", (json.dumps(old) + "\n").encode())  # a lab from before
    nodes = {}
    for node in ("a", "b"):
        env = subprocess_env(GLASSLAB_WORK=str(tmp_path / f"node-{node}"))
        nodes[node] = subprocess.Popen([sys.executable, "-c", NODE_WRITES, node], env=env, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for proc in nodes.values():
        assert proc.stdout.readline() == "registered\n", proc.stderr.read()[-3000:]
    nodes["a"].kill()  # SIGKILL after its registration: no push at a command's end will come
    assert nodes["b"].wait(timeout=60) == 0 and nodes["a"].wait() == -signal.SIGKILL
    monkeypatch.setenv("GLASSLAB_WORK", str(tmp_path / "node-c"))
    with lab_snapshot("s3://lab/shared") as view:  # a third node reads the root
        names = list(registry.predictions(view))
        events = {(e["kind"], e["subject"]) for e in read_lab_events(view)}
    assert names[0] == "old/hero/loss" and sorted(names[1:]) == ["a/hero/loss", "b/hero/loss"]
    assert {(k, f"{n}-hero") for k in ("prediction_registered", "note") for n in "ab"} <= events
    runs, notes = experiment_runs(view, "shared"), conclusions(view, "shared")  # a card's, from both nodes
    assert sorted(r["steps"]["hero"] for r in runs) == ["a-hero", "b-hero"]
    assert sorted(n["text"] for n in notes) == ["a concludes", "b concludes"]
    assert sorted(v["card"]["question"] for v in card_versions(view, "shared")) == ["asked by a", "asked by b"]
    with pytest.raises(UserError, match="already registered"):  # the registry each node decides against is the root's
        with lab_workspace("s3://lab/shared") as lab:
            registry.register(lab, "a/hero/loss", metric="eval/macro/loss", point=3.05, low=2.9, high=3.1,
                              target="a-hero", source="c-fit")


def _refuse_first_request(upstream: str) -> tuple[socket.socket, str]:
    """A relay to ``upstream`` that answers the very first request with ``503 Slow Down`` (a transient
    error) and passes every later connection through."""
    listener = socket.create_server(("127.0.0.1", 0))
    host, port = upstream.removeprefix("http://").split(":")

    def pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for s in (source, sink):
            s.close()

    def serve() -> None:
        first = True
        with contextlib.suppress(OSError):
            while True:
                client, _ = listener.accept()
                if first:
                    first = False
                    client.recv(65536)
                    client.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    client.close()
                    continue
                server = socket.create_connection((host, int(port)))
                threading.Thread(target=pump, args=(client, server), daemon=True).start()
                threading.Thread(target=pump, args=(server, client), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_transient_error_is_retried_and_said_once(endpoint, monkeypatch, capsys):
    listener, flaky = _refuse_first_request(endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", flaky)
    root = open_root("s3://lab/flaky")  # the probe's first PUT gets 503, the retry goes through
    assert root.put("k", b"v") and root.get("k") == b"v"
    said = [line for line in capsys.readouterr().err.splitlines() if "retrying" in line]
    assert said == ["s3://lab/flaky: a transient error from the store; retrying with backoff (said once)"]
    listener.close()


CHAIN = Path(__file__).with_name("store_chain.py")


def _summary(lab: Path) -> str:
    from rich.console import Console

    from glasslab.ladder.summary import summary_tables

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    for table in summary_tables(_only(lab, "store-fit-*"), _only(lab, "store-hero-*")):
        console.print(table)
    return console.export_text()


def _only(lab: Path, pattern: str) -> Path:
    (match,) = lab.glob(pattern)
    return match


def _state_files(run: Path) -> dict[str, bytes]:
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in run.rglob("*.pt")}


@pytest.fixture(scope="module")
def local_chain(tmp_path_factory) -> Path:
    """:data:`CHAIN` run on a local folder: what every run of it on the root must match."""
    lab = tmp_path_factory.mktemp("local-chain")
    ref = run_cli("run", str(CHAIN), "--lab", str(lab), "--force-registration", timeout=600)
    assert ref.returncode == 0, ref.stderr[-3000:]
    return lab


def _wait_for_hero_checkpoint(fs, lab: str, hero: str, *running: subprocess.Popen) -> None:
    deadline = time.monotonic() + 900  # generous: the rungs and the fit come first, and a loaded machine is slow
    while not fs.glob(f"{lab}/{hero}/checkpoints/step-*8/manifest.json"):
        for proc in running:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint of the hero reached the root"
        time.sleep(0.05)
        fs.invalidate_cache()


def _kill_node(work: Path) -> int:
    """SIGKILL every process of the Ray node whose processes were started with ``GLASSLAB_WORK=work`` (its raylet,
    its workers and the step processes they started): the node dies as a machine does. Returns how many."""
    marker = f"GLASSLAB_WORK={work}".encode()
    killed = 0
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            continue
    return killed


@pytest.mark.slow  # a Ray cluster of three raylets, the chain, a publish and a replay: ~70 s of CPU
def test_two_ray_nodes_that_share_no_disk_run_the_chain_and_the_heros_node_dies_and_it_resumes_on_the_other(
        endpoint, local_chain, tmp_path, monkeypatch):
    """Issue 44's nodes that share no disk: a Ray cluster of a head (no CPUs: it runs no step) and two nodes, each
    started with its own working folder; the executor runs on neither and joins the cluster with only the root's
    URL. The node running the hero is killed with SIGKILL after a checkpoint reached the root: Ray reports the
    task lost, the executor tries it again on the other node, which resumes from the root's checkpoint. A site
    published from the root then replays into another lab on the root."""
    import s3fs

    cluster_utils = pytest.importorskip("ray.cluster_utils")
    hero = _only(local_chain, "store-hero-*").name
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        nodes = {name: tmp_path / name for name in ("node-a", "node-b")}
        for work in nodes.values():
            monkeypatch.setenv("GLASSLAB_WORK", str(work))  # what this node's raylet and its workers see
            cluster.add_node(num_cpus=2)
        monkeypatch.delenv("GLASSLAB_WORK")
        driver = start_cli("run", str(CHAIN), "--backend", "ray", "--address", cluster.address, "--lab", "s3://lab/ray",
                           "--force-registration", GLASSLAB_WORK=str(tmp_path / "driver"))
        fs = s3fs.S3FileSystem()
        _wait_for_hero_checkpoint(fs, "lab/ray", hero, driver)
        (dying,) = [name for name, work in nodes.items() if (work / hero / "step.log").exists()]
        assert _kill_node(nodes[dying]) >= 2  # at least its raylet and the hero's step process
        out, err = driver.communicate(timeout=600)
        assert driver.returncode == 0, err[-3000:]
    finally:
        cluster.shutdown()
    (survivor,) = set(nodes) - {dying}
    assert "resuming from step " in (nodes[survivor] / hero / "step.log").read_text()
    data = _only(local_chain, "data-*").name  # both nodes trained on it: one built it, the other read its tokens
    indexes, token_shards = ({name: len(list((work / data).glob(f"shards/*/*.{kind}"))) for name, work in nodes.items()}
                             for kind in ("idx.npy", "bin"))  # from the root by range
    assert min(indexes.values()) > 0 and sorted(token_shards.values())[0] == 0, (indexes, token_shards)
    ran_on = {p.parent.name for work in nodes.values() for p in work.glob("*/step.log")}
    assert {p.name for p in local_chain.glob("store-*")} <= ran_on  # every step ran on a node, none by the executor
    work = tmp_path / "driver"  # the executor's copy: every step's folder pulled from the root as it ended
    assert _summary(work) == _summary(local_chain)  # the rungs, the fit and the hero's outcome
    for run in {p.name for p in local_chain.glob("store-*-s0-*")} | {hero}:
        assert _state_files(work / run) == _state_files(local_chain / run), run  # every checkpoint, bit for bit
    record = json.loads((work / hero / "step.json").read_text())
    assert record["status"] == "succeeded" and record["attempts"] == 2
    timeline = run_page(Lab(work), hero)["events"]
    (lost,) = [e for e in timeline if e["kind"] == "node_lost"]
    assert "its worker was lost" in lost["title"] and "Ray lost its worker" in lost["body"], lost
    assert any(e["kind"] == "resume" for e in timeline)

    site = tmp_path / "site"  # a site published from the root is replayed into another lab on the root
    published = run_cli("publish", "--lab", "s3://lab/ray", "--out", str(site), GLASSLAB_WORK=str(tmp_path / "c"))
    assert published.returncode == 0, published.stderr[-3000:]
    (page,) = site.glob(f"run-{hero}*.html")
    replay = run_cli("reproduce", str(page), "--until", "8", "--lab", "s3://lab/replay", timeout=300,
                     GLASSLAB_WORK=str(tmp_path / "d"))
    assert replay.returncode == 0, replay.stderr[-3000:]
    assert "bit-identical" in replay.stdout
    fs.invalidate_cache()
    assert fs.glob("lab/replay/*/step.json")


def test_a_node_reads_the_token_shards_by_range_and_its_batches_are_the_local_ones(endpoint, tmp_path, monkeypatch):
    lab = tmp_path / "built"
    dataset = build_tiny_dataset(lab)
    Mirror(open_root("s3://lab/ranges"), lab).push(dataset)
    monkeypatch.setattr(ranges, "BLOCK_BYTES", 1000)  # many small blocks: reads cross their borders,
    monkeypatch.setattr(ranges, "MAX_BLOCKS", 3)  # and blocks are dropped and fetched again
    monkeypatch.setenv("GLASSLAB_WORK", str(tmp_path / "node"))
    with lab_workspace("s3://lab/ranges") as work:
        copy = work / dataset.name
        assert list(copy.glob("shards/*/*.idx.npy")) and not list(copy.glob("shards/*/*.bin"))
        manifest = read_manifest(dataset)
        for domain in manifest["domains"]:
            local, remote = open_shard(dataset, domain, "train"), open_shard(copy, domain, "train")
            assert isinstance(remote.tokens, ranges.RangeTokens) and remote.num_tokens == local.num_tokens
            rng = np.random.default_rng(0)
            for start in rng.integers(0, local.num_tokens, 40):
                stop = int(start + rng.integers(0, 3000))
                assert np.array_equal(remote.tokens[start:stop], local.tokens[start:stop])
            assert remote.tokens[-1] == local.tokens[-1] and np.array_equal(np.asarray(remote.tokens), local.tokens)
        batches = {}
        for path in (dataset, copy):
            cfg = DataConfig(path=str(path), mixture=MixtureConfig(weights={"code": 0.5, "prose": 0.5}))
            loader = Loader(cfg, seq_len=32, global_batch=8)
            batches[path] = [loader.next_batch() for _ in range(30)]
        assert all(torch.equal(a, b) for a, b in zip(batches[dataset], batches[copy], strict=True))
    open_root("s3://lab/ranges").put(f"{dataset.name}/shards/code/train.bin", b"\0" * 10)  # damaged on the root
    monkeypatch.setenv("GLASSLAB_WORK", str(tmp_path / "another-node"))
    with lab_workspace("s3://lab/ranges") as work, pytest.raises(UserError, match="10 bytes, the manifest says"):
        open_shard(work / dataset.name, "code", "train")


def test_the_views_refresh_outlives_objects_removed_between_its_listing_and_its_fetch(endpoint, tmp_path, monkeypatch):

    root = open_root("s3://lab/churn")
    root.put("run/step-0", b"x" * 4096)
    monkeypatch.setenv("GLASSLAB_WORK", str(tmp_path / "viewer"))
    with lab_snapshot("s3://lab/churn", refresh_s=0.01) as view:
        for step in range(1, 150):  # a run keeping its last checkpoint, as retention does, while the view pulls
            root.put(f"run/step-{step}", b"x" * 4096)
            root.call("remove", root.fs.rm_file, root.key(f"run/step-{step - 1}"))
        root.put("run/done", b"")
        deadline = time.monotonic() + 20
        while not (view / "run" / "done").exists():
            assert time.monotonic() < deadline, "the view stopped refreshing"
            time.sleep(0.05)
        assert [t for t in threading.enumerate() if t.name == "lab-view"]


@pytest.mark.parametrize("strikes", ["mid-walk", "before-the-put"])
def test_a_push_walks_a_run_folder_while_retention_removes_its_checkpoints(endpoint, tmp_path, strikes):
    mirror, run = Mirror(open_root(f"s3://lab/retention-{strikes}"), tmp_path), tmp_path / "run"
    for step in (1, 2):
        for part in range(4):
            (run / "checkpoints" / f"step-{step}" / f"part-{part}").mkdir(parents=True)
            (run / "checkpoints" / f"step-{step}" / f"part-{part}" / "weights.bin").write_bytes(b"w" * 64)
    old = run / "checkpoints" / "step-1"
    hooked = "_written_elsewhere" if strikes == "mid-walk" else "send"
    original = getattr(mirror, hooked)

    def retention_strikes(*args):  # the trainer drops its older checkpoint while the push is under way
        shutil.rmtree(old, ignore_errors=True)
        return original(*args)

    setattr(mirror, hooked, retention_strikes)
    if strikes == "mid-walk":  # what is gone by the time the walk looks at it is passed over
        mirror.push(run)
    else:
        with pytest.raises(MissingObject):  # what the trainer's push thread starts over on (not a failure)
            mirror.push(run)
        mirror.push(run)  # the next push sends the rest and drops what retention removed
    on_root = {k.split("/checkpoints/")[1] for k in mirror.root.fs.find(mirror.root.key("run"))}
    assert on_root == {f"step-2/part-{part}/weights.bin" for part in range(4)}


def test_a_push_sends_only_what_the_root_does_not_hold_and_removes_pruned_checkpoints_in_bulk(
    endpoint, tmp_path
):
    """An object's time is the store's (whole seconds on S3), so a file written in the second of its PUT
    looked newer than its object and every push sent it again: the final checkpoint went up twice."""
    mirror, run = Mirror(open_root("s3://lab/pushes"), tmp_path), tmp_path / "run"
    for step in (1, 2):
        (run / "checkpoints" / f"step-{step}").mkdir(parents=True)
        for name in ("model.pt", "manifest.json"):
            (run / "checkpoints" / f"step-{step}" / name).write_bytes(b"w" * 64)
    assert mirror.push(run) == 4
    assert mirror.push(run) == 0
    (run / "checkpoints" / "step-2" / "model.pt").write_bytes(b"v" * 65)  # changed: sent again
    shutil.rmtree(run / "checkpoints" / "step-1")
    removals = []
    remove = mirror.root.fs.rm
    mirror.root.fs.rm = lambda keys, *args, **kwargs: removals.append(list(keys)) or remove(keys, *args, **kwargs)
    try:
        assert mirror.push(run) == 1
    finally:
        del mirror.root.fs.rm
    assert [sorted(k.rsplit("/", 1)[1] for k in keys) for keys in removals] == [["manifest.json"], ["model.pt"]]
    on_root = {k.split("/checkpoints/")[1] for k in mirror.root.fs.find(mirror.root.key("run"))}
    assert on_root == {"step-2/model.pt", "step-2/manifest.json"}
    assert mirror.root.fs.cat_file(mirror.root.key("run/checkpoints/step-2/model.pt")) == b"v" * 65


def test_serve_on_the_root_shows_a_run_another_node_pushes_while_it_serves(endpoint, tmp_path):
    import httpx

    dataset = build_tiny_dataset(tmp_path / "data")
    configs = []
    for seed in (0, 1):
        configs.append(tmp_path / f"run-{seed}.yaml")
        configs[-1].write_text(yaml.safe_dump(tiny_run_config(dataset, max_steps=4, checkpoint_interval=2, seed=seed)))
    first = run_cli("train", str(configs[0]), "--lab", "s3://lab/serve", GLASSLAB_WORK=str(tmp_path / "node-a"))
    assert first.returncode == 0, first.stderr[-3000:]
    server = start_cli("serve", "--lab", "s3://lab/serve", "--port", "0", "--every", "0.5",
                       GLASSLAB_WORK=str(tmp_path / "viewer"))
    try:
        line = server.stdout.readline()
        assert line.startswith("observatory for s3://lab/serve at http://"), line + server.stderr.read()[-2000:]
        url = line.split(" at ")[1].strip().rstrip("/")
        (run_a,) = [p.parent.name for p in (tmp_path / "node-a").glob("*/run.json")]
        page = httpx.get(f"{url}/api/page/run", params={"id": run_a}, timeout=30)
        assert page.status_code == 200 and run_a in page.text
        second = run_cli("train", str(configs[1]), "--lab", "s3://lab/serve", GLASSLAB_WORK=str(tmp_path / "node-b"))
        assert second.returncode == 0, second.stderr[-3000:]
        (run_b,) = [p.parent.name for p in (tmp_path / "node-b").glob("*/run.json") if p.parent.name != run_a]
        deadline = time.monotonic() + 30
        while run_b not in httpx.get(f"{url}/api/page/overview", timeout=30).text:
            if time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"{run_b} never showed up on the served overview; the server said: "
                            f"{server.communicate()[1][-3000:]}")
            time.sleep(0.2)
        assert (tmp_path / "viewer-view" / run_b / "metrics.db").is_file()  # read from the view, beside the work copy
    finally:
        server.kill()
        server.wait()
