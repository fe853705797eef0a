"""Run configs to start from: ``glasslab train --example dense|moe > run.yaml``.

Each is complete (every section, every key with its default) and commented from the config classes'
field docstrings, and trains as written on the built-in data: ``data.build: demo`` builds it first as a
dependency step (reused once built). The sizes train in a few minutes on a laptop CPU.
"""

from __future__ import annotations

from glasslab.config_docs import commented_yaml
from glasslab.data.config import DataConfig, MixtureConfig
from glasslab.errors import UserError
from glasslab.model import ModelConfig, MoEConfig
from glasslab.train.config import OptimizerConfig, TrainConfig
from glasslab.train.run_config import RunConfig

EXAMPLES = ("dense", "moe")
BUILTIN_MIXTURE = MixtureConfig(weights={"code": 0.75, "prose": 0.18, "reference": 0.07})
"""The demo's mixture of the three built-in domains, close to their sizes (so none repeats much)."""

HEADER = """glasslab run config ({kind}): every key with its default, each explained by the comment above it.
  glasslab train {file} [KEY=VALUE ...]        e.g. train.max_steps=20 train.sinks=[tensorboard]
data.build: demo builds the built-in data first (once; later runs reuse it). For your own data, point
data.build at a data build config (see README, "Bring your own data") or data.path at a built folder.
model.vocab_size: 0 takes the size of the dataset's tokenizer."""


def example_config(kind: str) -> RunConfig:
    """The example run config ``kind`` (``dense`` or ``moe``)."""
    if kind not in EXAMPLES:
        raise UserError(f"--example {kind!r}: expected one of {', '.join(EXAMPLES)}")
    moe = MoEConfig(num_experts=8, top_k=2, d_expert=64, num_shared_experts=1) if kind == "moe" else None
    model = ModelConfig(d_model=64, n_layers=4, n_heads=4, d_ff=192, moe=moe)
    train = TrainConfig(seq_len=64, global_batch_tokens=4096, max_steps=300, optimizer=OptimizerConfig(lr=3e-3),
                        eval_interval=50, sample_interval=100, checkpoint_interval=100)
    return RunConfig(model=model, data=DataConfig(build="demo", mixture=BUILTIN_MIXTURE), train=train)


def example_yaml(kind: str, file: str = "run.yaml") -> str:
    """The example as commented YAML (what ``glasslab train --example KIND`` prints)."""
    return commented_yaml(example_config(kind), HEADER.format(kind=kind, file=file))
