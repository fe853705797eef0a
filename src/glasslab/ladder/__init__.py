"""Scaling ladders: plan rungs, fit laws with honest uncertainty, predict and back-test the hero run."""
