"""Dense and MoE transformers: configs and accounting, the model, balancing, generation, HF export."""

from glasslab.model.balancing import Balancer, MoEStepStats
from glasslab.model.config import ModelConfig, MoEConfig, size_name
from glasslab.model.export import export_hf
from glasslab.model.generate import generate
from glasslab.model.transformer import Transformer

__all__ = [
    "Balancer",
    "ModelConfig",
    "MoEConfig",
    "MoEStepStats",
    "Transformer",
    "export_hf",
    "generate",
    "size_name",
]
