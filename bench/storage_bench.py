"""The lab on object storage against a local folder, side by side, on moto's S3-compatible server
started here (issue 44).

What runs on an ``s3://`` lab is the same code on a node-local working copy of the lab, kept in step with
the root whole file by whole file (``store/mirror.py``); so what this measures is what that copy costs:

1. ``train_tokens_per_s_s3_vs_local``: ``glasslab train`` of one small MoE run config, tokens trained over
   the command's wall seconds (start-up, the pull, every checkpoint's push and the last push included),
   on an ``s3://`` lab (a fresh working folder each time) over a local folder; interleaved, the median of
   the rounds' ratios.
2. ``loader_tokens_per_s_s3_vs_local``: a node that starts with nothing opens the lab (the pull leaves the
   dataset's token shards on the root), then the loader's batches (50 per training step of ``--steps``) are
   read from the shards by range with a cold cache (``store/ranges.py``), over the same batches read on the
   local folder. ``lab_open_s`` is the opening apart (the root's probe, its listing, the pull of every small
   file): once per command, whatever it reads.
3. ``checkpoint_write_s3_vs_local``: seconds of a checkpoint written and pushed to the root over seconds
   of it written locally (above 1 is slower).
4. ``data_build_s3_vs_local``: ``glasslab data build`` of the first ``--corpus-mb`` MB (default 20) of this
   interpreter's site-packages' Python sources (read from the local disk, so only the outputs go to the root;
   a smoke builds the tests' tiny corpus), throughput on an ``s3://`` lab over a local folder.
5. ``run_store_sync_lag_s``: seconds from a run store's last row to its snapshot on the root when pushed
   (the trainer pushes at every checkpoint, so a page elsewhere lags by at most the checkpoint interval
   plus this).

``--latency-ms 20`` puts every request through a small delaying proxy of the bench's own
(``DelayProxy``: a TCP relay that holds each new request ``--latency-ms`` before passing it on), the
``_latency`` lines. Run:
``python bench/storage_bench.py [--steps 60] [--repeats 3] [--latency-ms 20] [--corpus-mb 20]``;
``--smoke`` (4 steps, one round, 1 ms of latency, no training behind the proxy) only checks that it runs.

``--demo`` measures instead the whole ``glasslab demo --quick --no-serve`` on an ``s3://`` lab and on a local
folder (``--demo-local LAB``: against a finished local quick demo lab, whose time is then not measured):
``demo_tables_identical`` (the demo's tables, paths and times left out), ``demo_weights_identical`` (every
``model.pt`` and ``optimizer.pt`` of the two labs, by sha256) and ``demo_seconds_s3`` / ``_local``.
``--e2e`` runs the ``s3`` side on a Ray cluster started here: a head without CPUs and two nodes whose
processes each see a working folder of their own (the executor's is a third), and adds
``demo_e2e_step_folders_on_node_a`` / ``_b`` (the step folders in each node's working copy: the steps it ran
and the inputs it pulled for them).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import hashlib
import os
import re
import socket
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import yaml
from interleave import LoadWatch, headline

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from cli_runner import run_cli  # noqa: E402
from s3_server import s3_server  # noqa: E402
from train_data import build_tiny_dataset, tiny_run_config  # noqa: E402


class DelayProxy:
    """A TCP relay to ``upstream`` (host, port) on a free loopback port that holds every new request for
    ``latency_s`` before passing it on: a request is the client's bytes after the server last spoke."""

    def __init__(self, upstream: tuple[str, int], latency_s: float) -> None:
        self.upstream, self.latency_s = upstream, latency_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            turn = {"server_spoke": True}
            threading.Thread(target=self._pump, args=(client, server, turn, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, turn, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, turn: dict, delays: bool) -> None:
        try:
            while data := source.recv(65536):
                if delays and turn["server_spoke"]:
                    time.sleep(self.latency_s)
                turn["server_spoke"] = not delays
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                s.close()

    def close(self) -> None:
        self.listener.close()


def _train_seconds(config: Path, lab: str, work: Path) -> float:
    started = time.perf_counter()
    done = run_cli("train", str(config), "--lab", lab, GLASSLAB_WORK=str(work))
    if done.returncode != 0:
        raise SystemExit(f"glasslab train --lab {lab} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - started


def train_ratio(config: Path, tmp: Path, repeats: int, endpoint: str) -> list[float]:
    """Per round: s3 tokens/s over local tokens/s (the same tokens, so local seconds over s3 seconds)."""
    ratios = []
    for i in range(repeats):  # a lab of its own per endpoint on both sides: a run found done would take no time
        local = _train_seconds(config, str(tmp / f"local-{endpoint[-5:]}-{i}"), tmp / "unused")
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        s3 = _train_seconds(config, f"s3://lab/train-{endpoint[-5:]}-{i}", tmp / f"work-{endpoint[-5:]}-{i}")
        ratios.append(local / s3)
    return ratios


def data_build_ratio(tmp: Path, repeats: int, corpus_mb: float) -> list[float]:
    """Per round: ``glasslab data build`` of the first ``corpus_mb`` MB of this interpreter's site-packages'
    Python sources (0: the tests' tiny corpus), local seconds over s3 seconds."""
    from data_bench import corpus_config

    from glasslab import config as configs
    from train_data import tiny_build_config

    purelib = Path(sysconfig.get_paths()["purelib"])
    cfg = corpus_config(purelib, int(corpus_mb * 1e6)) if corpus_mb else tiny_build_config()
    build = tmp / "build.yaml"
    build.write_text(yaml.safe_dump(configs.to_dict(cfg)))
    ratios = []
    for i in range(repeats):
        seconds = []
        for lab in (str(tmp / f"build-local-{i}"), f"s3://lab/build-{i}"):
            started = time.perf_counter()
            done = run_cli("data", "build", str(build), "--lab", lab, "--quiet", GLASSLAB_WORK=str(tmp / f"bw-{i}"))
            if done.returncode != 0:
                raise SystemExit(f"glasslab data build --lab {lab} failed: {done.stderr[-2000:]}")
            seconds.append(time.perf_counter() - started)
        ratios.append(seconds[0] / seconds[1])
    return ratios


def loader_ratio(dataset: Path, tmp: Path, repeats: int, batches: int) -> tuple[list[float], list[float]]:
    """Per round: a fresh node opens the lab (the pull leaves the dataset's token shards on the root), then reads
    ``batches`` from the shards by range, cold: (reading them locally over reading them so, seconds to open)."""
    from glasslab.store.mirror import Mirror, lab_workspace
    from glasslab.store.url import open_root

    Mirror(open_root("s3://lab/loader"), dataset.parent).push(dataset)
    ratios, opening, saved = [], [], os.environ.get("GLASSLAB_WORK")
    try:
        for i in range(repeats):
            local = _read_batches(dataset, batches)
            os.environ["GLASSLAB_WORK"] = str(tmp / f"loader-{i}")
            started = time.perf_counter()
            with lab_workspace("s3://lab/loader") as work:
                opening.append(time.perf_counter() - started)
                ratios.append(local / _read_batches(work / dataset.name, batches))
    finally:
        os.environ.pop("GLASSLAB_WORK") if saved is None else os.environ.__setitem__("GLASSLAB_WORK", saved)
    return ratios, opening


def _read_batches(dataset: Path, batches: int) -> float:
    from glasslab.data.config import DataConfig
    from glasslab.data.loader import Loader
    from glasslab.data.mixture import MixtureConfig

    started = time.perf_counter()
    cfg = DataConfig(path=str(dataset), mixture=MixtureConfig(weights={"code": 0.5, "prose": 0.5}))
    loader = Loader(cfg, seq_len=32, global_batch=8, prefetch=False)
    for _ in range(batches):
        loader.next_batch()
    return time.perf_counter() - started


def checkpoint_ratio(run_dir: Path, repeats: int) -> list[float]:
    """Per round: seconds to write a checkpoint and push it to the root over writing it locally."""
    from glasslab.store.mirror import Mirror
    from glasslab.store.url import open_root
    from glasslab.train import checkpoint as ckpt

    parts = ckpt.load_checkpoint(ckpt.list_checkpoints(run_dir)[-1][1])
    mirror = Mirror(open_root("s3://lab/ckpt"), run_dir.parent)
    ratios = []
    for i in range(repeats):
        started = time.perf_counter()
        ckpt.save_checkpoint(run_dir, 1000 + 2 * i, parts)
        local = time.perf_counter() - started
        started = time.perf_counter()
        ckpt.save_checkpoint(run_dir, 1001 + 2 * i, parts)
        mirror.push(run_dir)
        ratios.append((time.perf_counter() - started) / local)
    return ratios


def sync_lag_s(run_dir: Path) -> float:
    """Seconds from the run store's last row to its consistent snapshot on the root."""
    import sqlite3

    from glasslab.store.mirror import sqlite_snapshot
    from glasslab.store.url import open_root

    root = open_root("s3://lab/lag")
    with sqlite3.connect(run_dir / "metrics.db") as db:
        db.execute("INSERT INTO events(step, time, kind, severity, title, body) VALUES (0, 0, 'note', 'info', 'x', '')")
    started = time.perf_counter()
    root.put(f"{run_dir.name}/metrics.db", sqlite_snapshot(run_dir / "metrics.db"))
    return time.perf_counter() - started


def demo_comparison(tmp: Path, local_lab: Path | None, ray_address: str | None = None) -> dict[str, object]:
    """The quick demo on ``s3://lab/demo`` (a fresh working folder; on the Ray cluster at ``ray_address`` when
    given), then on a local folder unless ``local_lab`` names a finished one; the tables and the training
    state files compared."""
    runs = {}
    on_ray = ("--backend", "ray", "--address", ray_address) if ray_address else ()
    for side, lab in (("s3", "s3://lab/demo"), ("local", str(local_lab or tmp / "demo-local"))):
        if side == "local" and local_lab is not None:
            runs[side] = (None, (local_lab / "demo.out").read_text(), local_lab)
            continue
        started = time.perf_counter()
        work = str(tmp / "demo-work")
        ray = on_ray if side == "s3" else ()
        done = run_cli("demo", "--quick", "--no-serve", *ray, "--lab", lab, timeout=3600, GLASSLAB_WORK=work,
                       COLUMNS="400")  # tables wide enough that no path wraps
        if done.returncode != 0:
            folder = Path(work if side == "s3" else lab)
            logs = [f"--- {log}:\n{log.read_text()[-1500:]}" for log in sorted(folder.glob("*/step.log"))
                    if '"failed"' in (log.parent / "step.json").read_text()]  # the scratch folder goes with the bench
            raise SystemExit(f"glasslab demo --lab {lab} failed: {done.stderr[-3000:]}\n" + "\n".join(logs))
        runs[side] = (time.perf_counter() - started, done.stdout, tmp / "demo-work" if side == "s3" else Path(lab))
    tables = {side: _demo_tables(out, folder) for side, (_, out, folder) in runs.items()}
    for line in list(difflib.unified_diff(tables["local"], tables["s3"], "local", "s3", lineterm="", n=0))[:40]:
        print(f"# {line}")  # what differs, when anything does
    weights = {side: _state_hashes(folder) for side, (_, _, folder) in runs.items()}
    return {
        "demo_seconds_s3": runs["s3"][0],
        "demo_seconds_local": runs["local"][0],
        "demo_tables_identical": tables["s3"] == tables["local"] and bool(tables["s3"]),
        "demo_weights_identical": f"{sum(weights['s3'].get(k) == v for k, v in weights['local'].items())} of "
                                  f"{len(weights['local'])} files (s3 has {len(weights['s3'])})",
    }


@contextlib.contextmanager
def ray_nodes(tmp: Path) -> Iterator[tuple[str, dict[str, Path]]]:
    """A Ray cluster on this machine: a head without CPUs (it runs no step) and two nodes of 2 CPUs, each whose
    processes see a working folder of their own (``GLASSLAB_WORK``); yields its address and the folders."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = {name: tmp / name for name in ("node_a", "node_b")}
    saved = os.environ.get("GLASSLAB_WORK")
    try:
        for work in nodes.values():
            os.environ["GLASSLAB_WORK"] = str(work)
            cluster.add_node(num_cpus=2)
        os.environ.pop("GLASSLAB_WORK")
        yield cluster.address, nodes
    finally:
        if saved is not None:
            os.environ["GLASSLAB_WORK"] = saved
        cluster.shutdown()


def _demo_tables(stdout: str, lab: Path) -> list[str]:
    """The demo's tables: its output up to the export lines, cell by cell (the columns' widths follow the lab's
    path), with the lab's path, any seconds and the result table's seconds column left out."""
    lines = []
    for line in stdout.split("the hero for transformers")[0].replace(str(lab), "LAB").splitlines():
        cells = [cell.strip() for cell in re.split(r"[│┃]", re.sub(r"\d+(\.\d+)? s\b", "", line))]
        if len(cells) == 8 and cells[2] in ("succeeded", "cached", "failed", "skipped"):  # the executor's result
            del cells[4]  # its seconds
        lines.append(" | ".join(c for c in cells if c.strip("━─┏┓┗┛┳┻╇┡┩╈╋┼└┘┌┐├┤┬┴ ")))
    return lines


def _state_hashes(lab: Path) -> dict[str, str]:
    """sha256 of every checkpoint's ``model.pt`` and ``optimizer.pt`` under ``lab``, by path in the lab."""
    return {
        path.relative_to(lab).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for name in ("model.pt", "optimizer.pt")
        for path in lab.rglob(name)
        if "/site/" not in path.as_posix()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=20.0, help="the proxy's delay per request")
    parser.add_argument("--corpus-mb", type=float, default=20.0,
                        help="MB of site-packages' Python sources for the data build (a smoke: the tests' tiny corpus)")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--demo", action="store_true", help="the quick demo on s3 and on a local folder instead")
    parser.add_argument("--demo-local", type=Path, default=None, metavar="LAB",
                        help="with --demo: a finished local quick demo lab (its stdout in LAB/demo.out)")
    parser.add_argument("--e2e", action="store_true",
                        help="--demo with the s3 side on a Ray cluster of two nodes that share no disk")
    args = parser.parse_args()
    if args.demo or args.e2e:
        with LoadWatch(), tempfile.TemporaryDirectory() as scratch, s3_server(buckets=("lab",)):
            with ray_nodes(Path(scratch)) if args.e2e else contextlib.nullcontext((None, {})) as (address, nodes):
                figures = demo_comparison(Path(scratch), args.demo_local, address)
            for name, work in nodes.items():  # the steps it ran, and the inputs it pulled for them
                figures[f"demo_e2e_step_folders_on_{name}"] = len(list(work.glob("*/step.log")))
            for name, value in figures.items():
                print(f"{name}: {value if not isinstance(value, float) else f'{value:.1f}'}")
            print(f"# load average {os.getloadavg()[0]:.1f} at the end")
        return
    steps, repeats = (4, 1) if args.smoke else (args.steps, args.repeats)
    if args.smoke:
        args.latency_ms = 1.0
    with LoadWatch(), tempfile.TemporaryDirectory() as scratch, s3_server(buckets=("lab",)) as endpoint:
        figures = measure(Path(scratch), endpoint, steps, repeats, args.latency_ms, args.smoke, args.corpus_mb)
        print(
            f"# {repeats} round(s), {steps} steps; latency proxy {args.latency_ms:g} ms per request; "
            f"load average {os.getloadavg()[0]:.1f} at the end"
        )
        for name, values, note in figures[:-1]:
            print(f"{name}: {headline(values, note) if values else f'n/a  ({note}; not measured in a smoke)'}")
        print(f"run_store_sync_lag_s: {figures[-1][1][0]:.3f}  ({figures[-1][2]})")


def measure(tmp: Path, endpoint: str, steps: int, repeats: int, latency_ms: float, smoke: bool,
            corpus_mb: float) -> list[tuple]:
    """Every figure as (name, per-round values, note), the sync lag last. A smoke leaves out training behind
    the latency proxy (two more training processes; the loader still goes through the proxy)."""
    dataset = build_tiny_dataset(tmp / "data")
    config = tmp / "run.yaml"
    config.write_text(
        yaml.safe_dump(tiny_run_config(dataset, moe=True, max_steps=steps, checkpoint_interval=max(2, steps // 5)))
    )
    host, port = endpoint.removeprefix("http://").split(":")
    proxy = DelayProxy((host, int(port)), latency_ms / 1000)
    try:
        train = train_ratio(config, tmp, repeats, endpoint)
        train_slow = [] if smoke else train_ratio(config, tmp, repeats, proxy.url)
        os.environ["AWS_ENDPOINT_URL"] = proxy.url
        loader_slow, _ = loader_ratio(dataset, tmp / "slow", repeats, batches=steps * 50)
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        loader, opening = loader_ratio(dataset, tmp, repeats, batches=steps * 50)
        build = data_build_ratio(tmp, repeats, 0 if smoke else corpus_mb)
        run_dir = next(p for p in (tmp / f"local-{endpoint[-5:]}-0").iterdir() if (p / "checkpoints").is_dir())
        ckpt, lag = checkpoint_ratio(run_dir, repeats), sync_lag_s(run_dir)
    finally:
        proxy.close()
    target = "target >= 0.8"
    return [
        ("train_tokens_per_s_s3_vs_local", train, target),
        ("train_tokens_per_s_s3_vs_local_latency", train_slow, f"{target}; {latency_ms:g} ms per request"),
        ("loader_tokens_per_s_s3_vs_local", loader, target),
        ("loader_tokens_per_s_s3_vs_local_latency", loader_slow, f"{target}; {latency_ms:g} ms per request"),
        ("lab_open_s", opening, "a fresh node's opening of the lab: the probe, the listing, the pull of small files"),
        ("data_build_s3_vs_local", build, "target >= 0.7; throughput, s3 over local"),
        ("checkpoint_write_s3_vs_local", ckpt, "seconds ratio, write + push over write; lower is better"),
        ("run_store_sync_lag_s", [lag], "the snapshot's PUT; a page elsewhere lags a checkpoint interval + this"),
    ]


if __name__ == "__main__":
    main()
