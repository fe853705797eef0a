"""The trainer: turns a RunConfig into a trained, fully observed run folder.

    from glasslab.train.run import train
    from glasslab.train.run_config import RunConfig
    result = train(run_cfg, Path("lab/my-run"), device="cpu")   # -> final metrics, eval/macro/loss included

Pieces, one idea per module (import each name from its module; this package re-exports nothing):
``config`` (TrainConfig, OptimizerConfig, ScheduleConfig, GuardConfig), ``run_config`` (RunConfig),
``optim`` and ``muon`` (optimisers), ``schedule``, ``checkpoint``, ``rng``, ``guard`` (spike guard),
``norms``, ``evals``, ``samples``, ``throughput`` (tokens/s, MFU, memory), ``distributed`` (torchrun),
``loop`` (the Trainer), ``hooks`` (its hook contract), ``recipe`` (what a run trains: its parts, built by
the recipe, never chosen here), ``build`` (pretraining's recipe: model/data wiring), ``fork``,
``run`` (``train()``: resume, fork, signals) and ``steps`` (the trainer as a lab step). Post-training
(``glasslab.posttrain``) hands its own recipes in; nothing here imports it.
"""
