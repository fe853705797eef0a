"""Task files and adapters, prompts as lm-eval builds them, and the batched scorer against a naive loop."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from glasslab.data.tokenizer import load_tokenizer
from glasslab.errors import UserError
from glasslab.evals.formats import read_items
from glasslab.evals.load import TaskScorer, load_task
from glasslab.evals.scorer import encode_task, loglikelihoods, score_task
from glasslab.evals.task import Item, Task, TaskConfig
from glasslab.model import ModelConfig, Transformer
from train_data import VOCAB, build_tiny_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return build_tiny_dataset(tmp_path_factory.mktemp("evals"))


@pytest.fixture(scope="module")
def tokenizer(dataset):
    return load_tokenizer(dataset)


def _write(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


ITEMS = [
    Item("def parse(line):\n    return", (" line", " None", " self.value", " 1"), 0),
    Item("The quick brown fox jumps over the", (" lazy dog", " moon"), 0),
    Item("Überprüfung der Zeichenkette: ", ("naïve café", "日本語のテキスト", "plain"), 1),  # trailing space moves
    Item("", ("import os", "x"), 0),  # an empty prompt is scored after the prefix token
    Item("for i in range(10):\n        ", ("print(i)", "pass", "break"), 2),
]


def test_each_layout_reads_into_items(tmp_path):
    cases = {
        "glasslab": {"context": "2 + 2 =", "choices": [" 4", " 5"], "answer": 0},
        "hellaswag": {"ctx": "A man sits down. He", "endings": ["eats.", "flies.", "sings.", "runs."], "label": "2"},
        "arc": {"question": "Which is a gas?", "choices": {"text": ["ice", "steam", "rock"], "label": ["A", "B", "C"]},
                "answerKey": "B"},
        "piqa": {"goal": "Open a jar", "sol1": "twist the lid", "sol2": "shake it", "label": 0},
    }
    expected = {
        "glasslab": Item("2 + 2 =", (" 4", " 5"), 0),
        "hellaswag": Item("A man sits down. He", ("eats.", "flies.", "sings.", "runs."), 2),
        "arc": Item("Which is a gas?", ("ice", "steam", "rock"), 1),
        "piqa": Item("Open a jar", ("twist the lid", "shake it"), 0),
    }
    for layout, row in cases.items():
        items, found = read_items(_write(tmp_path / f"{layout}.jsonl", [row, row]))
        assert found == layout
        assert items == [expected[layout]] * 2
    # ARC's numeric answer keys, and the layout's prompt (lm-eval's arc_easy asks the same way).
    row = {"question": "Q?", "choices": {"text": ["a", "b"], "label": ["1", "2"]}, "answerKey": "2"}
    task = load_task(TaskConfig(path=str(_write(tmp_path / "arc2.jsonl", [row]))))
    assert task.items[0].answer == 1
    assert task.prompt(0) == "Question: Q?\nAnswer:" and task.continuations(0) == [" a", " b"]


@pytest.mark.parametrize("rows, message", [
    (['{"context": "x", "choices": [" a", " b"], "answer": 0}', '{"context": "x", "choices": [" a"], "answer": 0}'],
     ":2: field 'choices': [' a']: expected a list of at least 2 strings"),
    (['{"context": "x", "choices": [" a", " b"], "answer": 2}'],
     ":1: field 'answer': 2: expected an index from 0 to 1"),
    (['{"ctx": "x", "endings": ["a", ""], "label": 0}'], ":1: field 'endings': choice 1 is ''"),
    (['{"question": "q", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "E"}'],
     ":1: field 'answerKey': 'E': expected one of the labels ['A', 'B']"),
    (['{"goal": "g", "sol1": "a", "sol2": "b", "label": 3}'], ":1: field 'label': 3: expected an index from 0 to 1"),
    (['', '{"context": "x", "choices": [" a", " b"], "answer": 0}', '{oops'], ":3: not valid JSON"),
    (['{"prompt": "x"}'], ":1: fields prompt fit no known layout"),
    (['[1, 2]'], ":1: expected a JSON object, got list"),
])
def test_bad_rows_get_one_line_naming_file_line_and_field(tmp_path, rows, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(UserError) as info:
        read_items(path)
    text = str(info.value)
    assert text.startswith(str(path)) and message in text and "\n" not in text


def test_task_config_is_checked():
    with pytest.raises(UserError, match="exactly one of builtin"):
        TaskConfig()
    with pytest.raises(UserError, match="task.template"):
        TaskConfig(path="x.jsonl", template="no placeholder")


def test_fewshot_prompt_is_lm_evals_first_n():
    task = Task("t", tuple(ITEMS[:3]), template="Q: {context}\nA:", num_fewshot=2)
    # Item 0 is asked: its examples are items 1 and 2 (the item itself is skipped, as lm-eval's first_n).
    assert task.prompt(0) == ("Q: The quick brown fox jumps over the\nA:  lazy dog\n\n"
                              "Q: Überprüfung der Zeichenkette: \nA: 日本語のテキスト\n\n"
                              "Q: def parse(line):\n    return\nA:")
    assert task.prompt(2).startswith("Q: def parse(line):\n    return\nA:  line\n\nQ: The quick")


def test_tokens_split_as_lm_eval_splits_them(tokenizer):
    task = Task("t", tuple(ITEMS), target_delimiter="")
    encoded = encode_task(task, tokenizer, prefix_id=0)
    # Trailing whitespace of the prompt moved into every continuation; the prompt's ids are shared.
    assert encoded[2].context == tuple(tokenizer.encode("Überprüfung der Zeichenkette:").ids)
    assert encoded[2].continuation_bytes == tuple(len((" " + c).encode()) for c in ITEMS[2].choices)
    assert encoded[2].choice_chars == (10, 8, 5)
    whole = tokenizer.encode("Überprüfung der Zeichenkette: naïve café").ids
    assert encoded[2].context + encoded[2].continuations[0] == tuple(whole)
    assert encoded[3].context == (0,)
    assert encoded[3].continuations[1] == tuple(tokenizer.encode("x").ids)


def test_a_chat_form_task_scores_the_tokens_of_the_conversation(tmp_path, tokenizer):
    from glasslab.data.chat import ChatEncoder

    rows = [{"context": "Name a fruit.", "choices": ["apple", "chair"], "answer": 0},
            {"context": "Name a colour.", "choices": ["green", "seven"], "answer": 0}]
    path = _write(tmp_path / "fruit.jsonl", rows)
    task = load_task(TaskConfig(path=str(path), chat=True, num_fewshot=1))
    assert task.name == "fruit_chat" and task.sha256 != load_task(TaskConfig(path=str(path))).sha256
    chat = ChatEncoder(tokenizer)
    (first, _) = encode_task(task, tokenizer, prefix_id=0)
    example = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "green"}]
    asked = [{"role": "user", "content": "Name a fruit."}]
    # The solved example is a whole exchange; the item's prompt ends with the assistant header (its newline
    # moves into the continuation, as lm-eval moves trailing whitespace), and the right choice is the reply
    # the chat template renders (everything but its closing <|im_end|>).
    header = chat.prompt_ids(example + asked)
    assert list(first.context) == header[:len(first.context)] and len(header) - len(first.context) == 1
    conversation = chat.encode(example + asked + [{"role": "assistant", "content": "apple"}]).ids.tolist()
    closing = [chat.im_end_id, *tokenizer.encode("\n", add_special_tokens=False).ids]
    assert conversation[-len(closing):] == closing
    assert list(first.context + first.continuations[0]) == conversation[:-len(closing)]


def _model(moe: bool = False) -> Transformer:
    torch.manual_seed(0)
    moe_cfg = {"num_experts": 4, "top_k": 2, "d_expert": 16} if moe else None
    from glasslab.config import from_dict

    cfg = from_dict(ModelConfig, {"vocab_size": VOCAB, "d_model": 32, "n_layers": 2, "n_heads": 2, "n_kv_heads": 1,
                                  "d_ff": 64, "moe": moe_cfg})
    return Transformer(cfg)


def _naive(model: nn.Module, encoded) -> list[list[float]]:
    """One unpadded forward per choice, no cache: what the batched scorer must equal."""
    out = []
    with torch.no_grad():
        for item in encoded:
            lls = []
            for cont in item.continuations:
                ids = torch.tensor([list(item.context) + list(cont)])
                logprobs = torch.log_softmax(model(ids[:, :-1]).float(), dim=-1)[0]
                scored = range(len(item.context) - 1, ids.shape[1] - 1)
                lls.append(sum(float(logprobs[p, ids[0, p + 1]]) for p in scored))
            out.append(lls)
    return out


class _NoCache(nn.Module):
    """The same model seen as any causal LM (no glasslab KV cache): the scorer runs whole sequences."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids)


@pytest.mark.parametrize("moe", [False, True])
def test_batched_scorer_equals_a_naive_per_choice_loop(tokenizer, moe):
    model = _model(moe).eval()
    # Many items of a few prompt lengths, so batches hold several prompts and choices of unequal length.
    items = tuple(ITEMS) * 3 + tuple(Item(f"x = {i} +", (f" {i}", " y", " (a, b)"), i % 3) for i in range(12))
    task = Task("t", items, target_delimiter="")
    encoded = encode_task(task, tokenizer, prefix_id=0)
    expected = _naive(model, encoded)
    for batch_tokens in (64, 8192):  # one item per batch, and everything of a length together
        got = loglikelihoods(model, encoded, device=torch.device("cpu"), batch_tokens=batch_tokens)
        assert got == [pytest.approx(e, abs=2e-4) for e in expected]
    whole = loglikelihoods(_NoCache(model), encoded, device=torch.device("cpu"))
    assert whole == [pytest.approx(e, abs=2e-4) for e in expected]
    again = loglikelihoods(model, encoded, device=torch.device("cpu"))
    assert again == loglikelihoods(model, encoded, device=torch.device("cpu"))  # deterministic, bit for bit


def test_metrics_follow_their_definitions(tokenizer):
    model = _model().eval()
    task = Task("t", tuple(ITEMS), target_delimiter="", metric="acc_norm")
    result = score_task(model, task, tokenizer, prefix_id=0)
    encoded = encode_task(task, tokenizer, prefix_id=0)
    lls = result.loglikelihoods
    pairs = list(zip(lls, ITEMS, strict=True))
    acc = sum(max(range(len(ll)), key=lambda c: (ll[c], -c)) == it.answer for ll, it in pairs) / len(ITEMS)
    acc_norm = sum(max(range(len(ll)), key=lambda c: (ll[c] / len(it.choices[c]), -c)) == it.answer
                   for ll, it in pairs) / len(ITEMS)
    bits = -sum(ll[it.answer] for ll, it in pairs) / math.log(2)
    nbytes = sum(e.continuation_bytes[e.answer] for e in encoded)
    assert (result.acc, result.acc_norm) == (acc, acc_norm)
    assert result.bpb == pytest.approx(bits / nbytes, rel=1e-9)
    assert result.chance == pytest.approx((1 / 4 + 1 / 2 + 1 / 3 + 1 / 2 + 1 / 3) / 5)
    assert result.headline == acc_norm
    metrics, _ = TaskScorer([task, Task("u", tuple(ITEMS[:2]))], tokenizer, prefix_id=0)(model)
    assert set(metrics) == {"eval/task/t/acc", "eval/task/t/acc_norm", "eval/task/t/bpb", "eval/task/u/acc",
                            "eval/task/u/acc_norm", "eval/task/u/bpb", "eval/task/macro/acc"}
    assert metrics["eval/task/macro/acc"] == pytest.approx((acc_norm + metrics["eval/task/u/acc"]) / 2)


def test_the_model_card_lists_each_task_with_its_chance_level():
    from glasslab.model.card import model_card

    metrics = {"eval/code/loss": 3.2, "eval/task/next_word_code/acc": 0.4183, "eval/task/next_word_code/acc_norm": 0.4,
               "eval/task/next_word_code/bpb": 1.25, "eval/task/macro/acc": 0.4183}
    facts = {"run": "demo-hero-1", "step": 10, "architecture": "Glm4MoeForCausalLM", "size_name": "1K",
             "evals": {"step": 10, "metrics": metrics,
                       "tasks": {"next_word_code": {"items": 597, "chance": 0.25, "metric": "acc"}}}}
    card = model_card(facts)
    assert "| next_word_code | 597 | 25.0% | 41.8% | 40.0% | 1.2500 |" in card
    assert "macro accuracy 41.8%" in card and "| eval/code/loss | 3.2000 |" in card
    assert "| eval/task/next_word_code/acc |" not in card  # once, in the task table
