"""glasslab: an open lab for training language models in public."""

__version__ = "0.1.0"
