"""Replay a published pretraining run and say, per published checkpoint, whether it came out the same.

``glasslab reproduce SOURCE`` reads the run's public record (``reproduce/published.py``), then:

1. refuses what it cannot replay in one line: a post-training or forked run (reproduce the parent first),
   a run whose code had uncommitted changes (the diff is not published, only its hash; a checkout holding
   that very diff on that commit may replay it), — unless ``allow_other_commit`` — a run of another commit
   (it says which ``git checkout`` to run), and — unless ``allow_dirty`` — a replay from a checkout with
   uncommitted changes the run was not trained with (with ``allow_dirty`` every line of the report says so);
2. finds the dataset in the lab by folder name and manifest hash, else builds it again with the step the
   site published (its function and config) and refuses when the rebuilt manifest's sha256 differs,
   naming the first entry (and file) of the published manifest that the rebuild does not match; a run by
   content cluster finds its data map beside the dataset, else maps it again from the recorded map config
   (a map planned in a DAG, as a map of the dataset's folder, which the replay's config then names);
3. trains the recorded config as a ``glasslab train`` step in the lab on the recorded device and CPU
   threads, up to ``until`` (the schedule stays
   the whole run's: it stops as a preemption does, and the same command without ``until`` resumes);
4. compares each published checkpoint up to there with the replay's by the sha256 of the weights'
   canonical bytes — **bit-identical**, or the first step where ``train/loss`` differs, the first whose
   input tokens' hash differs (the data order went apart, not the arithmetic), the largest loss difference
   (and, with the original's checkpoints at hand, the largest weight difference).

Same platform, commit, package versions and threads, bit-identical is the expectation; elsewhere the
report is a tolerance report and says what differs.
"""

from __future__ import annotations

import dataclasses
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from glasslab import config as configs
from glasslab.data.handle import find_dataset, open_dataset
from glasslab.data.map import MAP_FILE, STEP_NAME, MapConfig, map_step
from glasslab.data.reference import DatasetRef
from glasslab.errors import UserError
from glasslab.lab import Step, run_one_step
from glasslab.layout import CHECKPOINT_LIST, MODEL_STATE, checkpoint_path, code_version, read_json
from glasslab.public import Publicizer
from glasslab.track import RunReader
from glasslab.track.run_record import package_versions
from glasslab.track.step_record import by_step, step_record
from glasslab.train.run_config import RunConfig
from glasslab.train.steps import TrainingPreempted, TrainStepConfig, train_step

POST_TRAINING_ROLES = ("sft", "dpo", "rl")


@dataclass(frozen=True)
class PublishedRun:
    """What a run's public record says (``reproduce/published.py`` reads it from a site or a folder)."""

    run_id: str
    record: dict[str, Any]
    """``run.json`` as published (paths relative to the lab, no host)."""
    checkpoints: list[dict[str, Any]]
    """``checkpoints.json``'s entries: ``step``, ``tokens``, ``weights_sha256``, …"""
    losses: dict[int, float]
    """``train/loss`` by step, as logged (the latest attempt), every step."""
    batches: dict[int, str]
    """The hash of each step's input tokens (the attempt in force; its first hex digits as published)."""
    data_step: dict[str, Any] | None
    """``{"name", "function", "config", "manifest"}`` of the step that built the run's dataset and what it
    built (the dataset's ``manifest.json``), when published."""
    folder: Path | None = field(default=None)
    """The run folder when the record was read from one (its checkpoints' weights are then at hand)."""


@dataclass(frozen=True)
class CheckpointVerdict:
    step: int
    identical: bool | None
    """None: the replay kept no checkpoint at this step."""
    first_input_difference: int | None = None
    """The first step whose input tokens' hash differs: the data order, not the arithmetic, went apart."""
    first_loss_difference: int | None = None
    largest_loss_difference: float = 0.0
    largest_weight_difference: float | None = None


def check_replayable(run: PublishedRun, allow_other_commit: bool, allow_dirty: bool = False) -> None:
    """One-line UserErrors for what cannot be replayed here (see the module docstring, point 1)."""
    record = run.record
    parent = record.get("parent") or {}
    if record.get("role") in POST_TRAINING_ROLES or parent:
        name = parent.get("run") or parent.get("export") or "its parent"
        raise UserError(f"{run.run_id}: a {'post-training' if record.get('role') in POST_TRAINING_ROLES else 'forked'} "
                        f"run; reproduce its parent {name} first")
    code, current = record.get("code") or {}, code_version()
    here = current.get("commit")
    # Uncommitted changes: only this checkout's own, the same diff on the same commit, replay them.
    if code.get("dirty") and (code.get("commit"), code.get("diff_sha256")) != (here, current.get("diff_sha256")):
        raise UserError(f"{run.run_id}: trained with uncommitted changes (diff sha256 {code.get('diff_sha256')}) that "
                        "are not published; it cannot be replayed")
    if code.get("commit") and code["commit"] != here and not allow_other_commit:
        raise UserError(f"{run.run_id}: trained at commit {code['commit']}, this is {here}; run "
                        f"`git checkout {code['commit']}` first (or --allow-other-commit for a tolerance report)")
    diff = uncommitted_here(run)
    if diff and not allow_dirty:
        raise UserError(f"{run.run_id}: this checkout has uncommitted changes (diff sha256 {diff[:16]}) the run was "
                        "not trained with; commit or stash them (or --allow-dirty: every line of the report is "
                        "then marked)")


def uncommitted_here(run: PublishedRun) -> str | None:
    """The sha256 of this checkout's uncommitted diff when the run was not trained with that very diff, else None."""
    here = code_version().get("diff_sha256")
    return here if here and here != (run.record.get("code") or {}).get("diff_sha256") else None


def find_or_build_dataset(run: PublishedRun, lab: Path) -> Path:
    """The run's dataset in ``lab`` (folder name and manifest hash), else built again from the published step."""
    dataset = run.record.get("dataset") or {}
    name, digest = dataset.get("folder"), dataset.get("manifest_hash") or run.record.get("data_manifest_hash")
    if not name or not digest:
        raise UserError(f"{run.run_id}: its record names no dataset (folder and manifest hash)")
    candidate = lab / name
    found = find_dataset(candidate)
    if found is not None and found.manifest_hash == digest:
        return candidate
    if run.data_step is None:
        raise UserError(f"{run.run_id}: dataset {name} (manifest sha256 {digest[:16]}) is not in {lab} and the "
                        "step that built it is not published; put it there (or build it) first")
    built = run_one_step(Step(run.data_step["name"], run.data_step["function"], run.data_step["config"]), lab).folder
    rebuilt_dataset = open_dataset(built)
    rebuilt = rebuilt_dataset.manifest_hash
    if rebuilt != digest:
        published = run.data_step.get("manifest")
        # Both sides as published (paths made public), so only what was built can differ.
        public = Publicizer(lab)
        first = first_difference(public.data(published), public.data(rebuilt_dataset.manifest))
        raise UserError(f"{built}: rebuilt dataset's manifest sha256 {rebuilt[:16]} differs from the published "
                        f"{digest[:16]}" + (f"; first at {first}" if published and first else ""))
    return built


def first_difference(published: Any, rebuilt: Any, where: str = "") -> str | None:
    """Where two manifests first differ, in key order: a dotted key, with the file it describes when its
    entry names one (``domains.code.train.sha256 (shards/code/train.bin)``); None when they are equal."""
    if isinstance(published, dict) and isinstance(rebuilt, dict):
        for key in sorted(set(published) | set(rebuilt)):
            found = first_difference(published.get(key), rebuilt.get(key), f"{where}.{key}" if where else key)
            if found is not None:
                file = published.get("file")
                return found if not isinstance(file, str) or "(" in found else f"{found} ({file})"
        return None
    return None if published == rebuilt else where or "the manifest"


def recorded_maps(record: dict[str, Any]) -> dict[str, dict | None]:
    """The data maps a run's record names, folder name → the config the map step was made with (None where the
    record holds none): its mixture's (``data_map``) and its per-cluster evals' (``cluster_evals``)."""
    maps: dict[str, dict | None] = {}
    evals, mixture = record.get("cluster_evals") or {}, record.get("data_map") or {}
    if evals.get("map"):
        maps[evals["map"]] = evals.get("map_config")
    if mixture:
        maps[mixture["folder"]] = mixture.get("config")
    return maps


def find_or_make_map(run_id: str, folder: str, config: dict | None, dataset: Path) -> str:
    """The folder name of the data map ``folder`` of a run beside ``dataset``: that one when it is there, else one
    made again from ``config``, the map step's recorded config (a map is a function of the dataset and its
    settings: the same clusters). A map planned from a folder is made again under its own folder name; one planned
    in a DAG after the data build step (``data_from``, a step the replay does not plan) is made as a map of
    ``dataset``'s folder with the same settings: the same clusters under another folder name. One line when there
    is no config, the embedder is not fitted on the corpus, or a map planned from a folder comes out another."""
    if (dataset.parent / folder / MAP_FILE).is_file():
        return folder
    if not config:
        raise UserError(f"{run_id}: its data map {folder} is not beside {dataset} and its record holds no config to "
                        "map it again with (recorded before runs kept it); copy that map folder there first")
    if config.get("embedder", "tfidf") != "tfidf":
        raise UserError(f"{run_id}: its data map {folder} used the embedder {config['embedder']!r}; "
                        f"map {dataset} with it again (glasslab data map) before reproducing")
    map_cfg = configs.from_dict(MapConfig, {**config, "progress": False})
    remade = dataclasses.replace(map_cfg, data=DatasetRef.of_folder(str(dataset)))
    made = run_one_step(Step(STEP_NAME, map_step, remade), dataset.parent)
    if not map_cfg.data.data_from and made.folder.name != folder:
        raise UserError(f"{run_id}: mapping its dataset again made {made.folder.name}, not {folder}")
    return made.folder.name


def map_overrides(run: PublishedRun, dataset: Path) -> list[str]:
    """Every data map the run names, found or made again beside ``dataset``; for those made under another folder
    name (maps planned in a DAG), the overrides that name them instead (``data.map``, ``train.eval_map``)."""
    found = {folder: find_or_make_map(run.run_id, folder, config, dataset)
             for folder, config in recorded_maps(run.record).items()}
    config = run.record.get("config") or {}
    named = {"data.map": (config.get("data") or {}).get("map"),
             "train.eval_map": (config.get("train") or {}).get("eval_map")}
    return [f"{key}={found[Path(name).name]}" for key, name in named.items()
            if name and found.get(Path(name).name, Path(name).name) != Path(name).name]


def replay(run: PublishedRun, lab: Path, dataset: Path, until: int | None = None) -> Path:
    """Train the run's recorded config on ``dataset`` as a step in ``lab`` (stopping after ``until`` steps);
    returns the replay's folder. A run by cluster finds or makes its data map first (:func:`map_overrides`)."""
    config = configs.apply_overrides(run.record["config"], [f"data.path={dataset}", *map_overrides(run, dataset)])
    run_cfg = configs.from_dict(RunConfig, config)
    unplaced = dataclasses.replace(run_cfg, data=dataclasses.replace(run_cfg.data, build="", path=""))
    total = run_cfg.train.total_steps
    stop = until if until is not None and until < total else 0
    device = "cuda" if str(run.record.get("device", "cpu")).startswith("cuda") else "cpu"
    step_cfg = TrainStepConfig(run=unplaced, data=DatasetRef.of_folder(str(dataset)), device=device,
                               threads=int(run.record.get("threads") or 0), stop_after=stop)
    name = f"reproduce-{run.run_id.rsplit('-', 1)[0]}"
    try:
        return run_one_step(Step(name, train_step, step_cfg), lab).folder
    except TrainingPreempted:
        from glasslab.lab import make_plan

        return make_plan([Step(name, train_step, step_cfg)], lab).steps[-1].folder


def compare(run: PublishedRun, folder: Path, until: int | None = None) -> list[CheckpointVerdict]:
    """Each published checkpoint up to ``until`` against the replay in ``folder``."""
    replayed = {c["step"]: c for c in (read_json(folder / CHECKPOINT_LIST) or {}).get("checkpoints", [])}
    with RunReader(folder) as reader:
        losses, hashes = by_step(step_record(reader))
    verdicts = []
    for published in run.checkpoints:
        step = published["step"]
        if until is not None and step > until:
            continue
        checkpoint = replayed.get(step)
        if checkpoint is None:
            verdicts.append(CheckpointVerdict(step, None))
            continue
        if checkpoint.get("weights_sha256") == published.get("weights_sha256"):
            verdicts.append(CheckpointVerdict(step, True))
            continue
        inputs = sorted(s for s in run.batches if s in hashes and s <= step)
        first_input = next((s for s in inputs if not hashes[s].startswith(run.batches[s])), None)
        common = sorted(s for s in run.losses if s in losses and s <= step)
        first_loss = next((s for s in common if losses[s] != run.losses[s]), None)
        largest = max((abs(losses[s] - run.losses[s]) for s in common), default=0.0)
        verdicts.append(CheckpointVerdict(step, False, first_input, first_loss, largest,
                                          _weight_difference(run.folder, folder, step)))
    return verdicts


def _weight_difference(original: Path | None, replayed: Path, step: int) -> float | None:
    """The largest |difference| between the two runs' weights at ``step`` (None without the original's file)."""
    mine_file, theirs_file = checkpoint_path(replayed, step) / MODEL_STATE, None
    if original is not None:
        theirs_file = checkpoint_path(original, step) / MODEL_STATE
    if theirs_file is None or not theirs_file.is_file() or not mine_file.is_file():
        return None
    mine, theirs = (torch.load(f, map_location="cpu", weights_only=True) for f in (mine_file, theirs_file))
    return max(((mine[k].double() - theirs[k].double()).abs().max().item() for k in mine if k in theirs), default=0.0)


def setting_differences(run: PublishedRun) -> list[str]:
    """What differs here from where the run trained: platform, commit, the versions of the packages that
    decide what a run computes (empty: bit-identical is the expectation)."""
    found = []
    if run.record.get("platform") != platform.platform():
        found.append(f"platform {run.record.get('platform')} → {platform.platform()}")
    commit, here = (run.record.get("code") or {}).get("commit"), code_version().get("commit")
    if commit != here:
        found.append(f"commit {str(commit)[:12]} → {str(here)[:12]}")
    versions = package_versions()
    found += [f"{name} {old} → {versions.get(name)}" for name, old in sorted((run.record.get("packages") or {}).items())
              if name != "glasslab" and versions.get(name) != old]
    return found


def report_lines(run: PublishedRun, verdicts: list[CheckpointVerdict]) -> list[str]:
    """What ``glasslab reproduce`` prints: one line per published checkpoint, then a summary."""
    lines = []
    for v in verdicts:
        if v.identical is None:
            lines.append(f"step {v.step}: not kept by the replay")
        elif v.identical:
            lines.append(f"step {v.step}: bit-identical")
        else:
            where = (f"train/loss first differs at step {v.first_loss_difference}" if v.first_loss_difference
                     is not None else "train/loss the same at every logged step")
            where += (f", input tokens first differ at step {v.first_input_difference}"
                      if v.first_input_difference is not None else ", the same input tokens at every step")
            weights = "" if v.largest_weight_difference is None else \
                f", largest |weight difference| {v.largest_weight_difference:.3g}"
            lines.append(f"step {v.step}: differs ({where}; largest |loss difference| "
                         f"{v.largest_loss_difference:.3g}{weights})")
    same = sum(1 for v in verdicts if v.identical)
    differences = setting_differences(run)
    kind = f" (a tolerance report: {'; '.join(differences)})" if differences else ""
    lines.append(f"{run.run_id}: {same} of {len(verdicts)} published checkpoints bit-identical{kind}")
    diff = uncommitted_here(run)
    # Replayed on code the run never ran: no line may read as a clean replay's.
    return [f"[uncommitted changes {diff[:12]}] {line}" for line in lines] if diff else lines
