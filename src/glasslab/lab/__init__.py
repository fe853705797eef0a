"""The lab: steps with versioned output folders, and an executor that runs their DAG.

    from glasslab.lab import Step, Executor, Resources, RetryPolicy

    def tokenize(ctx):            # ctx.output_dir, ctx.config, ctx.inputs, ctx.lab_root, ctx.attempt
        ...

    tok = Step("tokenizer", tokenize, config=TokenizerConfig())
    train = Step("train", "glasslab.train.steps:train_step", config=run_cfg, deps=(tok,),
                 resources=Resources(cpus=1, workers=2), retry=RetryPolicy(count=2))
    Executor("lab", backend="local", jobs=2).run([tok, train])      # or: glasslab run FILE.py

Where a step runs. Every attempt is one step process, ``python -m glasslab.lab.worker`` (worker.py):
the local backend starts it as a subprocess of the executor; the Ray backend starts the same process
inside a Ray task that asks for the step's CPUs/GPUs. So a step behaves the same on both, and the
output folders and hashes are identical.

Multi-worker steps: one mechanism, torchrun. ``Resources(workers=N)`` with N > 1 makes the step
process a torchrun agent (one node, ``--standalone``) that runs the step function on N processes with
``RANK``/``LOCAL_RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` set; the function calls
``torch.distributed.init_process_group`` itself (gloo on CPU, nccl on GPU) exactly as under a
hand-run ``torchrun``. Locally that is N subprocesses; on Ray it is N processes inside one task that
reserved ``N * cpus`` CPUs and ``N * gpus`` GPUs on one node. ``workers`` is not part of the hash: with a
fixed global batch, the result does not depend on it.

Modules: step.py (identity and hashing), plan.py (DAG checks and what runs), executor.py, lock.py
(one executor per step, takeover of dead holders), status.py (``step.json``), attempt.py and worker.py
(the step process), local_backend.py, ray_backend.py, experiment.py (``steps()`` files and built-ins),
retry.py, display.py (terminal tables).
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
