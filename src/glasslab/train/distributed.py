"""torchrun support: process-group setup from the environment, DDP or FSDP2 wrapping, reductions.

``torchrun --nproc_per_node=N -m glasslab train ...`` sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``;
without them the trainer runs as a single process and every collective here is a no-op. The global
batch is fixed by the config, so each of N ranks takes 1/N of it and gradients are averaged by DDP
(or reduce-scattered by FSDP2) once per optimiser step, after the last micro-batch.

Under FSDP2 with bf16 the parameters are all-gathered in bf16 and gradients reduced in fp32
(``MixedPrecisionPolicy``), the fp32 master weights staying sharded; the routers keep fp32 weights
(their own small FSDP2 groups), so router logits stay fp32 as the MoE's routing contract says. A
sharded run saves and loads its model and optimiser with torch distributed checkpoint: each rank
writes and reads only its shards, and a checkpoint written by N ranks loads on any other number.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class DistContext:
    """Where this process sits in the job: rank, world size and its device."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    owns_group: bool = False
    """True when this context created the process group (and so must destroy it)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over ranks in place (no-op on one process)."""
        if self.active:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def all_gather_object(self, obj: object) -> list[object]:
        """``obj`` from every rank, in rank order."""
        if not self.active:
            return [obj]
        out: list[object] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def close(self, clean: bool = True) -> None:
        """Leave the process group. ``clean=False`` (this rank is raising) skips the barrier: a peer
        may be waiting in another collective, and the error must surface rather than hang there."""
        if self.owns_group and dist.is_initialized():
            if clean:
                # Leave together: a rank tearing gloo down while a peer still talks to it aborts the job.
                dist.barrier()
            dist.destroy_process_group()


def setup(device: str) -> DistContext:
    """Join the torchrun job described by the environment (if any) and pick this rank's device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch_device = torch.device("cuda", local_rank)
        torch.cuda.set_device(torch_device)
    else:
        torch_device = torch.device(device)
    owns = False
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch_device.type == "cuda" else "gloo")
        owns = True
    return DistContext(rank=rank, world_size=world_size, device=torch_device, owns_group=owns)


def wrap_model(model: nn.Module, ctx: DistContext, parallelism: str, bf16: bool = False) -> nn.Module:
    """The module to run forward/backward through: the model itself, DDP around it, or FSDP2-sharded.

    FSDP2 shards in place (each router, each block, then the root), so the returned module is
    ``model`` itself; with ``bf16`` its blocks gather bf16 parameters and reduce fp32 gradients.
    """
    if not ctx.active:
        return model
    if parallelism == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
        fp32 = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
        for block in model.blocks:
            router = getattr(block.ffn, "router", None)
            if router is not None:
                fully_shard(router, mp_policy=fp32)
            fully_shard(block, **({"mp_policy": policy} if policy else {}))
        return fully_shard(model, **({"mp_policy": policy} if policy else {}))
    # Buffers are not broadcast: router biases must agree because the balancer all-reduces its
    # statistics, and broadcasting would hide it if they did not.
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids, broadcast_buffers=False)


def gradient_sync(net: nn.Module, model: nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """Around one micro-batch's backward: reduce gradients over ranks now (``sync``, the step's last
    micro-batch) or let them accumulate locally (the others), under DDP (``no_sync``) and FSDP2
    (``set_requires_gradient_sync``) alike; nothing to do on one process."""
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    if sync or not hasattr(net, "no_sync"):
        return contextlib.nullcontext()
    return net.no_sync()


# --- model and optimiser state (under FSDP2 collectives: every rank calls these together) -----------


def _full_options(cpu_offload: bool):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload)


def full_model_state(model: nn.Module, sharded: bool) -> dict:
    """The model's full state dict on every rank (under FSDP2 gathered from the shards)."""
    if not sharded:
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_full_options(cpu_offload=False))


def _reshard(model: nn.Module) -> None:
    """Put every FSDP2 module back to its shards. After a forward without backward (an eval, a
    sample) the root keeps its gathered parameters, and the state-dict helpers would then see other
    tensors than the ones the optimiser holds."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def sharded_state(model: nn.Module, optimizers: list[torch.optim.Optimizer]) -> dict[str, dict | None]:
    """This rank's shards of the model and of every optimiser (by index), for a sharded checkpoint;
    the optimisers' entry is None before their first step."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    _reshard(model)
    # torch's getter would initialise an unstepped optimiser by taking a zero-gradient step, which
    # advances AdamW's step count and changes the bias correction of the real first step.
    stepped = all(opt.state for opt in optimizers)
    states = {str(i): get_optimizer_state_dict(model, opt) for i, opt in enumerate(optimizers)} if stepped else None
    return {"model": get_model_state_dict(model), "optimizer": states}


def load_sharded_state(model: nn.Module, optimizers: list[torch.optim.Optimizer], model_dir: Path,
                       optimizer_dir: Path | None, sharded: bool) -> None:
    """Read a sharded checkpoint's folders into ``model`` and ``optimizers``: this rank's shards when
    ``sharded`` (any number of ranks may have written them), else every tensor whole (one process,
    or DDP). ``optimizer_dir`` None: the checkpoint precedes the first optimiser step."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    _reshard(model)
    state = get_model_state_dict(model)
    dcp.load(state, checkpoint_id=model_dir, no_dist=not sharded)
    set_model_state_dict(model, state)
    if optimizer_dir is None:
        return
    # The getter's zero-gradient step (at learning rate 0) only shapes the state the load overwrites.
    states = {str(i): get_optimizer_state_dict(model, opt) for i, opt in enumerate(optimizers)}
    dcp.load(states, checkpoint_id=optimizer_dir, no_dist=not sharded)
    for i, opt in enumerate(optimizers):
        set_optimizer_state_dict(model, opt, states[str(i)])


def load_model_state(model: nn.Module, state: dict, sharded: bool) -> None:
    """Load a full state dict (every rank passes the whole of it; FSDP2 keeps its shard)."""
    if not sharded:
        model.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(model, state, options=_full_options(cpu_offload=False))


def load_optimizer_state(model: nn.Module, sharded: bool, optimizer: torch.optim.Optimizer,
                         state: dict | None) -> None:
    """Load one optimiser's full state dict, as ``optimizer.state_dict()`` wrote it in an unsharded run
    (every rank passes the whole of it; None: not stepped yet)."""
    if state is None:
        return
    if not sharded:
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    _reshard(model)
    set_optimizer_state_dict(model, optimizer, _keyed_by_name(model, optimizer, state),
                             options=_full_options(cpu_offload=False))


def _keyed_by_name(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> dict:
    """``state`` keyed by parameter names instead of positions, as torch's sharded loader reads it. The
    positions are those of ``optimizer``'s parameters: it was built from the same model's groups."""
    names = {id(p): n for n, p in model.named_parameters()}
    ordered = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    return {"state": {ordered[index]: value for index, value in state["state"].items()},
            "param_groups": [{**group, "params": [ordered[i] for i in group["params"]]}
                             for group in state["param_groups"]]}


def full_value(tensor: torch.Tensor) -> torch.Tensor:
    """A plain tensor from a possibly sharded (DTensor) one, e.g. a norm reduced over shards."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
