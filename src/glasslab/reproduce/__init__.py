"""Reproduce: read a published run back (a static site or a run folder) and replay it.

``published`` reads a run's public record; ``replay`` refuses what it cannot replay, finds or rebuilds the
dataset, trains the recorded config again and compares each published checkpoint (``glasslab reproduce``).
This part sits beside the CLI, above the trainer it replays with; the observatory never imports it (the
page shows live runs from the files they write).
"""
