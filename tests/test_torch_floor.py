"""The torch floor in pyproject.toml is what the code needs: every API below is used in src/, exists in
the installed torch, and is no newer than the floor. A new API from a later release goes in this table
(with the release that brought it) and raises the floor with it."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

NEEDED = {
    # API (dotted), the release that brought it, and the text that uses it in src/
    "torch.nn.utils.get_total_norm": ((2, 6), "get_total_norm"),
    "torch.nn.utils.clip_grads_with_norm_": ((2, 6), "clip_grads_with_norm_"),
    "torch.distributed.fsdp.fully_shard": ((2, 6), "fully_shard"),
    "torch.distributed.fsdp.MixedPrecisionPolicy": ((2, 6), "MixedPrecisionPolicy"),
    "torch.distributed.fsdp.FSDPModule": ((2, 6), "FSDPModule"),
    "torch.library.register_autocast": ((2, 5), "register_autocast"),
    "torch.library.custom_op": ((2, 4), "torch.library.custom_op"),
    # bf16 on CUDA (the experts' kernel); probed at run time, with a per-expert loop where it is missing
    "torch._grouped_mm": ((2, 8), "torch._grouped_mm"),
}


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _floor() -> tuple[int, int]:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in dependencies if re.match(r"torch\b", d)]
    major, minor = re.fullmatch(r"torch>=(\d+)\.(\d+)", spec.replace(" ", "")).groups()
    return int(major), int(minor)


def test_the_floor_covers_every_api_the_code_uses():
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "src").rglob("*.py"))
    floor = _floor()
    for dotted, (release, used_as) in NEEDED.items():
        assert used_as in source, f"{dotted} is no longer used: drop it from NEEDED (and maybe lower the floor)"
        assert _resolve(dotted) is not None
        assert release <= floor, f"{dotted} needs torch {release}, pyproject.toml allows {floor}"
    assert floor == max(release for release, _ in NEEDED.values())  # no higher than needed either
    installed = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())
    assert installed >= floor
