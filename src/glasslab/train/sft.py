"""Supervised fine-tuning: the second objective of the one trainer, and the lab step that runs it.

A run whose config has an ``sft`` section (:class:`~glasslab.train.config.SFTConfig`) is built here
instead of as pretraining: its model starts from the base checkpoint's weights (a fresh optimiser
and its own schedule), its loader serves conversations (:mod:`glasslab.data.packing`), its objective
counts the assistant's tokens only, its evals add the held-out SFT loss ``eval/sft/loss`` to the
base dataset's domain losses (to watch forgetting), and its samples are chat replies to fixed
prompts. Everything else — resume, rollback, spike guard, checkpoints, run store — is the trainer's.

The step (``sft_step``) takes the base run and a conversations folder from its dependencies; a run
config with an ``sft`` section also trains with plain ``glasslab train``. Either way ``run.json`` holds
the role ``sft``, the parent link and, measured before step 0, the base model's held-out SFT loss and
its replies to the same prompts (``base``, by :func:`sft_baseline`), so a page can show both side by side.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from glasslab import config as configs
from glasslab.config import UNVERSIONED
from glasslab.data.chat import ChatEncoder
from glasslab.data.conversations import read_conversation_split
from glasslab.data.packing import ConversationLoader, heldout_batches
from glasslab.data.tokenizer import PAD, load_tokenizer
from glasslab.errors import UserError
from glasslab.evals.load import MACRO_ACC
from glasslab.layout import RESULT_FILE, read_json
from glasslab.model import Transformer, generate
from glasslab.track import RunReader, read_record
from glasslab.train import checkpoint as ckpt
from glasslab.train.config import OptimizerConfig, ScheduleConfig, SFTConfig, TrainConfig
from glasslab.train.loop import RunParts
from glasslab.train.objectives import AssistantOnly
from glasslab.train.rng import seed_everything
from glasslab.train.run_config import RunConfig
from glasslab.train.samples import take_samples

CHAT_PROMPTS = (
    "What does `json.dumps` do?",
    "Explain `assert` in Python.",
    "Write a Python function `clamp(x, low, high)`: Return x limited to the range [low, high].",
)
"""User messages the samples reply to (the base model's replies are recorded beside them)."""


def resolve_base(ref: str) -> tuple[Path, int, Path]:
    """(run folder, step, checkpoint folder) of ``RUN_DIR@STEP`` or ``RUN_DIR`` (its newest intact checkpoint)."""
    if not ref:
        raise UserError("sft.base: empty; expected the base checkpoint as RUN_DIR@STEP or RUN_DIR")
    head, sep, tail = ref.rpartition("@")
    if sep and tail.isdigit():
        run_dir, step = Path(head), int(tail)
        return run_dir, step, ckpt.intact_checkpoint(run_dir, step)
    found = ckpt.latest_valid(Path(ref))
    if found is None:
        raise UserError(f"sft.base={ref!r}: no intact checkpoint in {ref}")
    return Path(ref), found[0], found[1]


def load_base_weights(model: nn.Module, run_cfg: RunConfig) -> None:
    """Copy the base checkpoint's parameters and buffers (router biases too) into ``model``."""
    _, _, path = resolve_base(run_cfg.sft.base)
    changed = configs.diff(ckpt.checkpoint_config(path)["model"], configs.to_dict(run_cfg.model))
    if changed:
        fields = ", ".join(f"model.{key}" for key in changed)
        raise UserError(f"sft.base={run_cfg.sft.base!r}: SFT keeps the base's model, but {fields} differ")
    ckpt.load_model_weights(model, path)


def base_record(run_cfg: RunConfig) -> dict[str, Any]:
    """``run.json`` fields of an SFT run: role and the parent checkpoint."""
    run_dir, step, _ = resolve_base(run_cfg.sft.base)
    return {"role": "sft", "parent": {"run": run_dir.name, "run_dir": str(run_dir), "step": step}}


# --- the parts the loop trains ----------------------------------------------------------------------


def build_sft_parts(run_cfg: RunConfig, device: torch.device, rank: int = 0, world_size: int = 1) -> RunParts:
    """Conversation loader first (bad data fails before any compute), then the base model."""
    from glasslab.train.build import checkpoint_activations, domain_evaluator

    cfg, sft = run_cfg.train, _checked(run_cfg)
    tokenizer = load_tokenizer(run_cfg.data.path)
    encoder = ChatEncoder(tokenizer)
    conversations = encoder.encode_many([r["messages"] for r in read_conversation_split(sft.conversations, "train")])
    loader = ConversationLoader(conversations, cfg.seq_len, cfg.global_batch_size, tokenizer.token_to_id(PAD),
                                sft.packing, seed=cfg.seed, rank=rank, world_size=world_size)
    seed_everything(cfg.seed)
    model = Transformer(run_cfg.model)
    load_base_weights(model, run_cfg)
    if cfg.activation_checkpointing:
        checkpoint_activations(model.blocks)
    return RunParts(model=model, balancer=model.balancer, loader=loader,
                    flops_per_token=run_cfg.model.flops_per_token(cfg.seq_len),
                    evaluate=_evaluator(run_cfg, encoder, domain_evaluator(run_cfg, device, tokenizer), device),
                    sample=_chat_sampler(cfg, encoder), objective=AssistantOnly())


def _checked(run_cfg: RunConfig) -> SFTConfig:
    sft = run_cfg.sft
    if not sft.conversations:
        raise UserError("sft.conversations: empty; expected a conversations folder")
    return sft


def _evaluator(run_cfg: RunConfig, encoder: ChatEncoder, domains, device: torch.device):
    cfg, sft = run_cfg.train, run_cfg.sft
    heldout = encoder.encode_many([r["messages"] for r in read_conversation_split(sft.conversations, "heldout")])
    pad_id = encoder.tokenizer.token_to_id(PAD)

    def evaluate(model: nn.Module, step: int) -> dict[str, float]:
        batches = heldout_batches(heldout, cfg.seq_len, cfg.eval_batch_size, pad_id, sft.eval_max_conversations)
        return {**domains(model, step), "eval/sft/loss": heldout_sft_loss(model, batches, device)}

    return evaluate


@torch.no_grad()
def heldout_sft_loss(model: nn.Module, batches, device: torch.device) -> float:
    """Mean loss in nats per assistant token over held-out SFT batches (eval mode, then back)."""
    was_training = model.training
    model.eval()
    nats, tokens = 0.0, 0
    try:
        for batch in batches:
            batch = batch.to(device)
            logits_BTV = model(batch.tokens_BT, doc_ids_BT=batch.doc_ids_BT)
            targets_N = batch.targets_BT.flatten()
            nats += F.cross_entropy(logits_BTV.float().flatten(0, 1), targets_N, reduction="sum").item()
            tokens += batch.loss_tokens
    finally:
        model.train(was_training)
    return nats / tokens


class _ChatPrompts:
    """Lets ``take_samples`` pose each prompt as a user message and read back the assistant's reply."""

    def __init__(self, encoder: ChatEncoder) -> None:
        self.encoder = encoder

    def encode(self, text: str) -> list[int]:
        return self.encoder.prompt_ids([{"role": "user", "content": text}])

    def decode(self, ids: list[int]) -> str:
        return self.encoder.decode_reply(ids)


def _chat_sampler(cfg: TrainConfig, encoder: ChatEncoder):
    if not (cfg.sample_prompts and cfg.sample_max_new_tokens):
        return None
    prompts = _ChatPrompts(encoder)

    def sample(model: nn.Module, step: int) -> list[tuple[str, str]]:
        replies = take_samples(model, prompts, cfg.sample_prompts, cfg.sample_max_new_tokens, seed=cfg.seed + step,
                               generate=generate, eos_id=encoder.im_end_id)
        return [(chat_turns("user", prompt), chat_turns("assistant", reply)) for prompt, reply in replies]

    return sample


def chat_turns(role: str, content: str) -> str:
    """A sample's prompt or text as a conversation, ``[{"role", "content"}]`` in JSON: the form the run page
    draws as chat turns (:func:`turn_text` reads it back)."""
    return json.dumps([{"role": role, "content": content}], ensure_ascii=False)


def turn_text(sample_text: str) -> str:
    """The content of a sample written by :func:`chat_turns` (the text itself for a plain sample)."""
    try:
        turns = json.loads(sample_text)
    except ValueError:
        return sample_text
    return turns[-1]["content"] if isinstance(turns, list) and turns else sample_text


def sft_outcome(run_dir: str | Path) -> dict[str, Any]:
    """A finished SFT run in numbers: held-out SFT loss of the base and after (nats per assistant token) and
    its relative change, each task's accuracy before and after (``tasks``: name -> (before, after), the
    macro average as ``macro``), and the last sample's first prompt with the base's and the run's replies."""
    record = read_record(run_dir) or {}
    result = read_json(Path(run_dir) / RESULT_FILE) or {}
    base = record.get("base", {})
    before = base.get("metrics", {}).get("eval/sft/loss")
    after = result.get("eval/sft/loss")
    with RunReader(run_dir) as reader:
        samples = reader.samples()
    last = [s for s in samples if samples and s["step"] == samples[-1]["step"]]
    prompt = turn_text(last[0]["prompt"]) if last else ""
    base_reply = next((turn_text(s["text"]) for s in base.get("samples", []) if turn_text(s["prompt"]) == prompt), "")
    keys = [key for key in result if key.startswith("eval/task/") and key.endswith("/acc")
            and key in base.get("metrics", {})]
    tasks = {key.split("/")[2]: (base["metrics"][key], result[key])
             for key in sorted(keys, key=lambda k: (k == MACRO_ACC, k))}  # the macro average last
    return {"before": before, "after": after,
            "relative": (after - before) / before if before and after is not None else None,
            "tasks": tasks, "prompt": prompt, "base_reply": base_reply,
            "reply": turn_text(last[0]["text"]) if last else ""}


def sft_baseline(run_cfg: RunConfig, device: str = "cpu") -> dict[str, Any]:
    """The base model's metrics (domain losses, ``eval/sft/loss``, the tasks) and its replies to the sample
    prompts: evaluated as the run's last evaluation will be, so every final metric has its before."""
    torch_device = torch.device(device)
    parts = build_sft_parts(run_cfg, torch_device)
    model = parts.model.to(torch_device)
    metrics = parts.evaluate(model, run_cfg.train.total_steps)
    samples = parts.sample(model, 0) if parts.sample is not None else []
    return {"metrics": metrics, "samples": [{"prompt": p, "text": t} for p, t in samples]}


# --- the lab step ---------------------------------------------------------------------------------------


def default_sft_train() -> TrainConfig:
    """A short SFT schedule: a lower LR than pretraining, brief warmup, linear decay to zero."""
    return TrainConfig(seq_len=256, global_batch_tokens=256 * 16, max_steps=200,
                       optimizer=OptimizerConfig(lr=1e-3, weight_decay=0.0),
                       schedule=ScheduleConfig(kind="linear", warmup_fraction=0.05, min_lr_ratio=0.0),
                       sample_prompts=CHAT_PROMPTS, sample_max_new_tokens=48, checkpoint_interval=100)


@dataclass(frozen=True)
class SFTStepConfig:
    """SFT of a base run as a step: its own schedule; base and conversations from dependencies."""

    train: TrainConfig = field(default_factory=default_sft_train)
    """The SFT run's batch, budget, optimiser and schedule (``seq_len`` is the conversation row length)."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Packing and held-out eval; ``base``/``conversations`` are filled from ``base_from``/``conversations_from``."""
    base_from: str = ""
    """Dependency whose output folder is the base run (its newest intact checkpoint is the start)."""
    conversations_from: str = ""
    """Dependency whose output folder is the conversations folder."""
    record_extra: dict[str, Any] = field(default_factory=dict)
    """More ``run.json`` fields."""
    device: str = field(default="cpu", metadata=UNVERSIONED)
    """Where to train (``cpu``, ``cuda``)."""
    threads: int = field(default=0, metadata=UNVERSIONED)
    """torch CPU threads (0 = torch's default)."""


def sft_run_config(cfg: SFTStepConfig, inputs: dict[str, Path]) -> RunConfig:
    """The SFT run's config: the base's model and dataset, this step's schedule and conversations."""
    base = str(inputs[cfg.base_from]) if cfg.base_from else cfg.sft.base
    conversations = str(inputs[cfg.conversations_from]) if cfg.conversations_from else cfg.sft.conversations
    run_dir, step, path = resolve_base(base)
    base_config = ckpt.checkpoint_config(path)
    sft = dataclasses.replace(cfg.sft, base=f"{run_dir}@{step}", conversations=conversations)
    return configs.from_dict(RunConfig, {"model": base_config["model"], "data": base_config["data"],
                                         "train": configs.to_dict(cfg.train), "sft": configs.to_dict(sft)})


def sft_step(ctx: Any) -> dict[str, Any]:
    """Fine-tune the base run into ``ctx.output_dir`` (resuming a failed attempt); return the final metrics."""
    from glasslab.train.steps import TrainStepConfig, run_training

    cfg: SFTStepConfig = ctx.config
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    run_cfg = sft_run_config(cfg, ctx.inputs)
    step_ctx = dataclasses.replace(ctx, config=TrainStepConfig(run=run_cfg, device=cfg.device, threads=cfg.threads))
    return run_training(step_ctx, dict(cfg.record_extra))
