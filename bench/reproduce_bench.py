"""A run reproduced from its published site alone: how many published checkpoints come out bit-identical,
and what the replay's training costs against the original's.

    python bench/reproduce_bench.py            # the quick demo's data and its smallest rung, 5 rounds (~15 min)
    python bench/reproduce_bench.py --smoke    # a 12-step tiny run (CI)

The original is trained into a lab, the lab published, the site copied elsewhere and the lab deleted;
``glasslab reproduce`` then rebuilds the data from the site's record, trains the recorded config again
and compares each published checkpoint's weights hash. Both trainings run in this one invocation, one
after the other, so the ratio compares them on the same machine under the same load; ``--repeats`` rounds
(5; 1 in a smoke) alternate original and replay, and the ratio is the median of the rounds' ratios with its
spread (bench/interleave.py).

Headlines: ``reproduce_bit_identical_checkpoints`` (target: all of them), ``reproduce_train_seconds_ratio``
(the replay's training seconds ÷ the original's, target ≤ 1.1).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from interleave import LoadWatch, headline

from glasslab.lab import Step, run_one_step
from glasslab.observatory.publish import publish


def train_original(lab: Path, smoke: bool) -> Path:
    """The run to reproduce, trained into ``lab``; returns its folder."""
    if smoke:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from glasslab.data.build import build_step
        from train_data import tiny_build_config, tiny_run_config

        dataset = run_one_step(Step("data", build_step, tiny_build_config()), lab).folder
        config = tiny_run_config(dataset, moe=True, max_steps=12, checkpoint_interval=8, keep_log=True,
                                 schedule={"kind": "wsd", "warmup_fraction": 0.0, "decay_fraction": 0.25})
        path = lab.parent / "run.json"
        path.write_text(json.dumps(config))
        subprocess.run([sys.executable, "-m", "glasslab", "train", str(path), "--lab", str(lab)], check=True)
        (folder,) = lab.glob("run-*")
        return folder
    from glasslab.experiments.demo import QUICK, demo_steps

    rung = next(s for s in demo_steps(QUICK) if s.name.startswith("demo-d16"))
    return run_one_step(rung, lab).folder  # builds the data step it depends on first


def original_then_replay(root: Path, smoke: bool) -> tuple[float, float, int, int, str]:
    """One round in ``root``: train the original, publish it, delete the lab, reproduce it from the copied
    site alone. Returns the two training times in seconds, the identical and the published checkpoints,
    and the replay's name."""
    lab = root / "lab"
    root.mkdir(parents=True)
    original = train_original(lab, smoke)
    original_seconds = json.loads((original / "result.json").read_text())["seconds"]
    publish(lab, root / "site")
    shutil.copytree(root / "site", root / "elsewhere")
    shutil.rmtree(lab)  # the site alone from here on
    (page,) = (root / "elsewhere").glob(f"run-{original.name}-*.html")
    done = subprocess.run([sys.executable, "-m", "glasslab", "reproduce", str(page), "--lab", str(root / "replay")],
                          capture_output=True, text=True)
    print(done.stdout, end="")
    if done.returncode not in (0, 1):
        sys.exit(f"glasslab reproduce failed: {done.stderr.strip()[-2000:]}")
    (replay,) = (root / "replay").glob("reproduce-*")
    replay_seconds = json.loads((replay / "result.json").read_text())["seconds"]
    same, total = map(int, re.search(r"(\d+) of (\d+) published checkpoints", done.stdout).groups())
    return original_seconds, replay_seconds, same, total, original.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a 12-step tiny run instead of a quick-demo rung, "
                        "one round")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of original then replay")
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="reproduce-bench-") as tmp:
        for index in range(1 if args.smoke else args.repeats):  # original, replay, original, replay, ...
            rounds.append(original_then_replay(Path(tmp) / f"round-{index}", args.smoke))
    for original_s, replay_s, _, _, name in rounds:
        print(f"original training {original_s:.1f} s, replay {replay_s:.1f} s ({name})")
    same, total = sum(r[2] for r in rounds), sum(r[3] for r in rounds)
    ratios = [replay_s / original_s for original_s, replay_s, *_ in rounds]
    print(f"reproduce_bit_identical_checkpoints: {same}/{total}  (target all; rounds: {len(rounds)})")
    print(f"reproduce_train_seconds_ratio: {headline(ratios, 'target <= 1.1', digits=3)}")


if __name__ == "__main__":
    with LoadWatch():
        main()
