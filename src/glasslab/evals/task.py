"""A downstream task: multiple-choice items, the prompt around them, and the config that names them.

An item is ``{context, choices, answer}``: the model scores every choice as a continuation of the
item's prompt, and the answer is the index of the right one. The prompt is built exactly as
lm-eval-harness builds a multiple-choice request, so a task and its lm-eval YAML (see
:mod:`glasslab.evals.harness`) score the same text:

    prompt       = fewshot_examples + template(context)
    continuation = target_delimiter + choice
    fewshot_examples = Σ (template(example.context) + target_delimiter + example's right choice
                          + fewshot_delimiter) over the first ``num_fewshot`` other items

A task's ``sha256`` covers its items and everything that shapes the prompt, so a number measured on a
task names exactly what was asked.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal

from glasslab.config import require

TEMPLATE_FIELD = "{context}"
"""The one placeholder of a prompt template: the item's context."""


@dataclass(frozen=True)
class TaskConfig:
    """One task a run or ``glasslab eval`` scores: a built-in task or a local JSONL file."""

    name: str = ""
    """Metric name part (``eval/task/<name>/acc``); defaults to the built-in's name or the file's stem."""
    builtin: str = ""
    """A built-in task made from the dataset's held-out split (see :mod:`glasslab.evals.builtin`)."""
    domain: str = ""
    """The dataset domain a built-in task is made from (empty: the built-in's default domain)."""
    path: str = ""
    """A local JSONL file of items, in glasslab's layout or a HellaSwag/ARC/PIQA-style one."""
    layout: Literal["auto", "glasslab", "hellaswag", "arc", "piqa"] = "auto"
    """How the file's rows are laid out (``auto``: told by the first row's fields)."""
    num_fewshot: int = 0
    """Solved examples (the first items of the task other than the one asked) before each prompt."""
    template: str | None = None
    """Prompt around the context, with ``{context}`` where it goes (None: the layout's default)."""
    target_delimiter: str | None = None
    """Text between prompt and choice (None: ``" "`` for files, as lm-eval; built-ins bring their own)."""
    fewshot_delimiter: str = "\n\n"
    """Text after each solved example."""
    metric: Literal["acc", "acc_norm"] = "acc"
    """The task's headline accuracy, the one ``eval/task/macro/acc`` averages."""
    max_items: int = 0
    """Score only the first this-many items (0 = all)."""
    chat: bool = False
    """Pose every item as a chat turn (ChatML, as the chat template renders it): the prompt is the user's
    message, each choice begins the assistant's reply, and a solved example ends its reply with
    ``<|im_end|>``. The default name gets ``_chat``. For a model fine-tuned on conversations (SFT)."""

    def __post_init__(self) -> None:
        require(bool(self.builtin) != bool(self.path), "task.builtin", self.builtin or self.path,
                "exactly one of builtin (a built-in task name) or path (a JSONL file)")
        require(self.num_fewshot >= 0, "task.num_fewshot", self.num_fewshot, ">= 0")
        require(self.max_items >= 0, "task.max_items", self.max_items, ">= 0")
        require(self.template is None or TEMPLATE_FIELD in self.template, "task.template", self.template,
                f"a prompt containing {TEMPLATE_FIELD}")
        require(self.name == "" or ("/" not in self.name and self.name.strip() == self.name), "task.name",
                self.name, "a name without '/' or surrounding spaces (it becomes part of a metric name)")


@dataclass(frozen=True)
class Item:
    """One question: the context, its choices (non-empty strings) and the index of the right one."""

    context: str
    choices: tuple[str, ...]
    answer: int


@dataclass(frozen=True)
class Task:
    """Items plus how their prompts are built; what the scorer consumes."""

    name: str
    items: tuple[Item, ...]
    template: str = TEMPLATE_FIELD
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"
    num_fewshot: int = 0
    metric: Literal["acc", "acc_norm"] = "acc"
    source: str = ""
    """Where the items came from (a file path, or ``builtin:<name>`` with the dataset's manifest hash)."""
    dropped: int = 0
    """Items left out while making the task (a built-in's items whose answer occurs in training)."""

    @property
    def chance(self) -> float:
        """Expected accuracy of a uniform guess: the mean over items of 1 / number of choices."""
        return sum(1 / len(item.choices) for item in self.items) / len(self.items)

    @property
    def sha256(self) -> str:
        """Hash of the items and the prompt settings: equal hashes ask the model the same questions."""
        digest = hashlib.sha256()
        settings = [self.template, self.target_delimiter, self.fewshot_delimiter, self.num_fewshot]
        digest.update(json.dumps(settings, ensure_ascii=False).encode())
        for item in self.items:
            digest.update(json.dumps([item.context, list(item.choices), item.answer], ensure_ascii=False).encode())
            digest.update(b"\n")
        return digest.hexdigest()

    def prompt(self, index: int) -> str:
        """The text every choice of item ``index`` is scored after (solved examples included)."""
        return self._fewshot_prefix(index) + self.template.replace(TEMPLATE_FIELD, self.items[index].context)

    def continuations(self, index: int) -> list[str]:
        """The texts scored after the prompt of item ``index``: the delimiter and each choice."""
        return [self.target_delimiter + choice for choice in self.items[index].choices]

    def _fewshot_prefix(self, index: int) -> str:
        if not self.num_fewshot:
            return ""
        asked = self.items[index]
        # As lm-eval's first_n sampler: the first items, skipping any equal to the one asked.
        examples = [item for item in self.items if item != asked][: self.num_fewshot]
        return "".join(self.template.replace(TEMPLATE_FIELD, ex.context) + self.target_delimiter
                       + ex.choices[ex.answer] + self.fewshot_delimiter for ex in examples)

    def describe(self) -> dict:
        """What a run record says about the task: chance level, item count, hash and source."""
        return {"chance": self.chance, "items": len(self.items), "metric": self.metric,
                "num_fewshot": self.num_fewshot, "sha256": self.sha256, "source": self.source,
                "dropped": self.dropped}
