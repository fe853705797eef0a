"""Every random number generator the trainer touches, captured and restored for exact resume."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def capture_rng() -> dict[str, Any]:
    """The state of Python's, NumPy's and torch's (CPU and every CUDA device's) generators."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back generator states captured by :func:`capture_rng`, wherever their tensors were loaded.

    Generators take their state as a CPU byte tensor, so a state read onto a GPU is brought back to the
    host first. CUDA states are restored for the devices this process sees: a run saved where 8 GPUs
    were visible may resume where fewer are (each rank uses its own device; states of devices it
    cannot see have no generator to go to).
    """
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(_host_bytes(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        for index, cuda_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(_host_bytes(cuda_state), index)


def _host_bytes(state: torch.Tensor) -> torch.Tensor:
    return state.to(device="cpu", dtype=torch.uint8)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices) from one integer."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
