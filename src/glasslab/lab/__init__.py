"""The lab: steps with versioned output folders, and an executor that runs their DAG.

    from glasslab.lab import Step, Executor, Resources, RetryPolicy

    def tokenize(ctx):            # ctx.output_dir, ctx.config, ctx.inputs, ctx.lab_root, ctx.attempt
        ...

    tok = Step("tokenizer", tokenize, config=TokenizerConfig())
    train = Step("train", "glasslab.train.steps:train_step", config=run_cfg, deps=(tok,),
                 resources=Resources(cpus=1, workers=2), retry=RetryPolicy(count=2))
    Executor("lab", backend="local", jobs=2).run([tok, train])      # or: glasslab run FILE.py

Where a step runs. Every attempt is one call on the lab's task pool (pool.py), the pool the data
build's tasks run on too: on ``local`` a forked pool process, on ``ray`` a Ray task that asks for the
step's CPUs/GPUs; either starts the same step process, ``python -m glasslab.lab.worker`` (worker.py,
step_task.py). So a step behaves the same on both, and the output folders and hashes are identical.

Multi-worker steps: one mechanism, torchrun. ``Resources(workers=N)`` with N > 1 makes the step
process a torchrun agent (one node, ``--standalone``) that runs the step function on N processes with
``RANK``/``LOCAL_RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` set; the function calls
``torch.distributed.init_process_group`` itself (gloo on CPU, nccl on GPU) exactly as under a
hand-run ``torchrun``. Locally that is N subprocesses; on Ray it is N processes inside one task that
reserved ``N * cpus`` CPUs and ``N * gpus`` GPUs on one node. ``workers`` is not part of the hash: with a
fixed global batch, the result does not depend on it.

Commands are steps too: ``glasslab train``, ``data build`` and ``ladder fit`` each run one step
through :func:`run_one_step` (one_step.py), in their own process (the inline pool), so every folder
in a lab has a ``step.json``, a lock and lab events, whoever made it.

Modules, in import order: modules.py (experiment files as modules), retry.py, inputs.py (a config's typed
references to other steps' outputs: the edges they add, the paths the executor fills), step.py (identity and
hashing), status.py (``step.json``), lock.py (one executor per step, takeover of dead holders),
plan.py (DAG checks and what runs), outcome.py (what became of each step), attempt.py and worker.py
(the step process), ray_join.py (the one way to join Ray), pool.py and pool_ray.py (the one task pool:
inline, local processes or Ray, for the steps and the data build's tasks alike), step_task.py (a step
attempt as a call on the pool), display.py (terminal tables), executor.py, one_step.py,
experiment.py (``steps()`` files and built-ins), registry.py (the lab's pre-registered predictions).
"""

from glasslab.lab.executor import Executor
from glasslab.lab.experiment import builtin_experiments, load_experiment
from glasslab.lab.inputs import NO_OUTPUT, RunOutput, StepOutput, output_of, run_output_of
from glasslab.lab.one_step import StepRun, run_one_step
from glasslab.lab.outcome import RunReport, StepOutcome
from glasslab.lab.plan import Plan, PlannedStep, make_plan
from glasslab.lab.retry import RetryPolicy
from glasslab.lab.status import read_step_record
from glasslab.lab.step import Resources, Step, StepContext, folder_name, planned_folder_name, step_hash

__all__ = [
    "NO_OUTPUT", "Executor", "Plan", "PlannedStep", "Resources", "RetryPolicy", "RunOutput", "RunReport", "Step",
    "StepContext",
    "StepOutcome", "StepOutput", "StepRun", "builtin_experiments", "folder_name", "load_experiment", "make_plan",
    "output_of", "planned_folder_name", "run_output_of", "read_step_record", "run_one_step", "step_hash",
]
