"""Downstream tasks: multiple-choice items scored by log-likelihood, as lm-eval-harness scores them.

Import each name from its module (this package re-exports nothing, so the import linter sees every edge):

- ``task``: ``TaskConfig``, ``Task``, ``Item`` — a task and the config naming it;
- ``formats``: ``read_items``, ``write_items`` — task files, with adapters for HellaSwag/ARC/PIQA layouts;
- ``load``: ``load_task``, ``load_tasks`` (a config to a task, built-in or from a file), ``TaskScorer``;
- ``scorer``: ``score_task``, ``TaskResult``;
- ``builtin``: tasks made from a dataset's held-out split; ``harness``: lm-eval task YAML.

This part imports ``data`` and ``model``, never ``train``: the trainer calls it at eval intervals.
"""
