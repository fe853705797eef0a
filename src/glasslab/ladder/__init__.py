"""Scaling ladders: plan rungs, fit laws with honest uncertainty, predict and back-test the hero run.

Modules, one idea each (imported directly; this package imports nothing so ``fit`` stays torch-free):

- ``plan``: ``LadderSpec`` → ``plan_ladder`` (width ladder, budgets, isoFLOP, grid), the named batch/learning-rate
  rule (``ScalingRule``), ``rung_record_extra`` for the runs, ``plan_table``.
- ``rungs``: ``Rung`` (what a rung's seeds measured) and the input checks; ``runs``: rungs from run
  folders; ``points``: rungs from a CSV or JSON file of (flops, loss[, seed, params, tokens]) points.
- ``compute_law``: ``L(C) = L∞ + A·C^(−α)`` fits (pinned or free L∞), vectorised.
- ``approach3``: Chinchilla approach 3 as the end-point law (``grid_ends``) over rungs that vary tokens per
  parameter, gated, with the compute-optimal (N, D) in closed form.
- ``uncertainty``: the seed-spread parametric bootstrap; ``predict``: point + 90% interval widened by
  the L∞ sweep, and the curve every 5% of training; ``backtest``: roll-forward leave-last-rung-out.
- ``fit``: the whole analysis as ``fit.json`` (``fit_ladder``, ``write_fit``, ``read_fit``);
  ``figures``: the PNG/SVG; ``preregister``: the hero's prediction in the lab's registry and its run.json,
  and the band watcher (a trainer callback); ``summary``: the tables a person reads (fit, rungs, hero);
  ``steps``: a plan as executor steps (rungs, grid trunks and their cooldown branches, fit, hero).
- Floor mode ``grid``: ``curves`` (runs' eval curves with their schedule's forward and annealing areas),
  ``varpro`` (variable projection: exponents on a grid, coefficients in closed form, many data sets at
  once), ``grid_law`` (``L(N, S1, S2)``, its fit and family bootstrap), ``grid_fit`` (its ``fit.json``: the
  floor, the hero's whole curve, the back-test and checks), ``grid_sim`` (synthetic grids: coverage).
- ``gate``: the registration gate's checks; ``hero_floor``: the floor calibrated on earlier heroes of the
  same recipe and the end-point prediction on it; ``gate_sim``: synthetic grids for the gate.
"""
