"""``glasslab run bench/eval_ladder_experiment.py --lab LAB``: the demo's ladder with built-in tasks scored.

The demo's data, rungs, fit and hero (``--quick`` sizes unless ``GLASSLAB_EVAL_LADDER=full``), every
run scoring the built-in tasks at every 5th evaluation (every 25% of training) and at its end, so
the fit step writes task laws into ``fit.json`` and ``bench/eval_bench.py --lab LAB`` can read the
accuracy back-test. Until the demo itself carries tasks, this is how the task numbers are made.
"""

from __future__ import annotations

import dataclasses
import os

from glasslab.evals import TaskConfig
from glasslab.experiments.demo import L_INF, L_INF_SWEEP, MIXTURE, build_config, plan, train_recipe
from glasslab.lab import Step
from glasslab.ladder.steps import DATA_STEP, ladder_steps

TASKS = (TaskConfig(builtin="next_word", domain="code"), TaskConfig(builtin="next_word", domain="prose"))
"""What the demo should score: the two built-ins its models beat chance on most, >= 500 items each."""


def steps() -> list[Step]:
    quick = os.environ.get("GLASSLAB_EVAL_LADDER", "quick") != "full"
    data = Step(DATA_STEP, "glasslab.data.build:build_step", build_config(quick))
    recipe = dataclasses.replace(train_recipe(quick), eval_tasks=TASKS, task_eval_every=5)
    return [data, *ladder_steps(plan(quick), data, MIXTURE, recipe, L_inf=L_INF, sweep=L_INF_SWEEP, threads=1,
                                num_bootstrap=300 if quick else 1000)]
