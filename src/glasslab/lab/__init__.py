"""The lab: steps with versioned output folders, and an executor that runs their DAG.

    from glasslab.lab import Step, Executor, Resources, RetryPolicy

    def tokenize(ctx):            # ctx.output_dir, ctx.config, ctx.inputs, ctx.lab_root
        ...

    tok = Step("tokenizer", tokenize, config=TokenizerConfig())
    train = Step("train", "glasslab.train.steps:train_step", config=run_cfg, deps=(tok,),
                 resources=Resources(cpus=1, workers=2), retry=RetryPolicy(count=2))
    Executor("lab", backend="local", jobs=2).run([tok, train])

See step.py (identity and hashing), plan.py (DAG checks), executor.py (running), lock.py, status.py
(``step.json``), worker.py (the step process, torchrun for multi-worker steps), local_backend.py and
ray_backend.py, experiment.py (``steps()`` files), retry.py.
"""

from glasslab.lab.executor import Executor, RunReport, StepOutcome
from glasslab.lab.experiment import builtin_experiments, load_experiment
from glasslab.lab.plan import Plan, PlannedStep, make_plan
from glasslab.lab.retry import RetryPolicy
from glasslab.lab.status import read_step_record
from glasslab.lab.step import Resources, Step, StepContext, folder_name, step_hash

__all__ = [
    "Executor", "Plan", "PlannedStep", "Resources", "RetryPolicy", "RunReport", "Step", "StepContext",
    "StepOutcome", "builtin_experiments", "folder_name", "load_experiment", "make_plan", "read_step_record",
    "step_hash",
]
