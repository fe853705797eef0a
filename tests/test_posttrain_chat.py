"""``glasslab chat``: replies equal transformers' generate on the export (greedy), sampling draws from the
same next-token distributions, the terminal session streams, resets and quits."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import transformers

from glasslab.cli import main as cli_main
from glasslab.config import from_dict
from glasslab.model.generate import generate, next_token_probs
from glasslab.posttrain.chat import ChatSession, Sampling, load_chat_model
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_data import build_tiny_dataset, tiny_run_config

MESSAGES = [{"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What does `os.path.join` do?"}]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("chat")
    dataset = build_tiny_dataset(root)
    train(from_dict(RunConfig, tiny_run_config(dataset, max_steps=30, checkpoint_interval=30, seq_len=64)),
          root / "run")
    return root / "run"


@pytest.fixture(scope="module")
def export_dir(run_dir) -> Path:
    """``glasslab export`` of the run, in the run's lab (the run's parent folder)."""
    assert cli_main(["export", run_dir.name, "--lab", str(run_dir.parent)]) == 0
    (folder,) = run_dir.parent.glob("export-*")
    return folder


@pytest.fixture(scope="module")
def exported(run_dir, export_dir):
    chat = load_chat_model(str(run_dir))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32).eval()
    return chat, hf, transformers.AutoTokenizer.from_pretrained(export_dir)


def test_greedy_replies_equal_transformers_generate_on_the_export(exported, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    chat, hf, hf_tokenizer = exported
    prompt = hf_tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=False)
    assert prompt == chat.encoder.prompt_ids(MESSAGES)
    im_end = chat.encoder.im_end_id
    assert hf.generation_config.eos_token_id == [im_end, hf_tokenizer.eos_token_id]
    ours = generate(chat.model, prompt, 40, temperature=0.0, eos_id=[im_end, hf_tokenizer.eos_token_id])
    with torch.no_grad():
        theirs = hf.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=40)[0, len(prompt):].tolist()
    assert ours == theirs and len(ours) >= 10


def test_sampling_draws_from_the_distribution_transformers_samples_from(exported):
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    chat, hf, _ = exported
    ids = chat.encoder.prompt_ids(MESSAGES) + [300, 301, 302]
    with torch.no_grad():
        ours_V, theirs_V = chat.model(torch.tensor([ids]))[0, -1], hf(torch.tensor([ids])).logits[0, -1]
    for temperature, top_k, top_p in ((1.0, 0, 1.0), (0.7, 0, 0.9), (1.3, 20, 1.0), (0.8, 50, 0.6)):
        warped = TemperatureLogitsWarper(temperature)(None, theirs_V[None].clone())
        if top_k:
            warped = TopKLogitsWarper(top_k)(None, warped)
        if top_p < 1:
            warped = TopPLogitsWarper(top_p)(None, warped)
        expected = torch.softmax(warped[0], dim=-1)
        got = next_token_probs(ours_V, temperature, top_k, top_p)
        assert (got - expected).abs().max() < 1e-5, (temperature, top_k, top_p)
        assert int((got > 0).sum()) == int((expected > 0).sum()) < (top_k or 10**9) + 1
    draws = [generate(chat.model, ids, 1, temperature=0.8, top_k=50, top_p=0.6, seed=s)[0] for s in range(100)]
    probs = next_token_probs(ours_V, 0.8, 50, 0.6)
    top = int(probs.argmax())
    assert set(draws) <= set(torch.nonzero(probs).flatten().tolist())
    assert abs(draws.count(top) / 100 - float(probs[top])) < 0.15  # 3 standard deviations at most


def test_session_keeps_history_resets_and_fits_the_context(run_dir):
    chat = load_chat_model(str(run_dir))
    session = ChatSession(chat, Sampling(temperature=0.0, max_new_tokens=8), system="Be brief.")
    first = "".join(session.reply("Hello?"))
    assert session.messages == [{"role": "user", "content": "Hello?"}, {"role": "assistant", "content": first}]
    assert first == chat.encoder.decode_reply(generate(chat.model, chat.encoder.prompt_ids(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello?"}]), 8, temperature=0.0))
    for _ in range(4):
        "".join(session.reply("And then what happened next in the story?"))
    assert len(session.prompt_ids("Last one?")) + 8 <= chat.context  # the oldest exchanges were dropped
    session.reset()
    assert session.messages == []


def test_cli_prompt_and_interactive_session(run_dir, capsys, monkeypatch):
    assert cli_main(["chat", f"{run_dir}@30", "--prompt", "Hello?", "--temperature", "0", "--max-new-tokens",
                     "8"]) == 0
    one = capsys.readouterr().out
    session = ChatSession(load_chat_model(str(run_dir)), Sampling(temperature=0.0, max_new_tokens=8))
    assert one == "".join(session.reply("Hello?")) + "\n"
    lines = iter(["Hello?", "/reset", "", "/quit", "never read"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    assert cli_main(["chat", str(run_dir), "--temperature", "0", "--max-new-tokens", "8"]) == 0
    out, err = capsys.readouterr()
    assert out == "assistant> " + one and "base model" in err and "conversation reset" in err
    assert cli_main(["chat", f"{run_dir}@7", "--prompt", "x"]) == 2
    assert "no checkpoint at step 7" in capsys.readouterr().err


def test_chat_with_an_export_replies_as_the_checkpoint_does(run_dir, export_dir, capsys):
    greedy = Sampling(temperature=0.0, max_new_tokens=12)
    checkpoint = load_chat_model(str(run_dir))
    ours = "".join(ChatSession(checkpoint, greedy).reply("Hello?"))
    chat = load_chat_model(str(export_dir))
    assert (chat.name, chat.step, chat.context) == (export_dir.name, 30, 64)
    # The export's weights mapped back to ours are the checkpoint's, bit for bit (the mapping's exact inverse).
    theirs = chat.model.state_dict()
    assert all(torch.equal(t, theirs[k]) for k, t in checkpoint.model.state_dict().items())
    assert "".join(ChatSession(chat, greedy).reply("Hello?")) == ours
    sampled = Sampling(temperature=0.9, top_k=40, top_p=0.8, max_new_tokens=12, seed=3)
    assert ("".join(ChatSession(chat, sampled).reply("Hello?"))
            == "".join(ChatSession(load_chat_model(str(run_dir)), sampled).reply("Hello?")))
    assert cli_main(["chat", export_dir.name, "--lab", str(run_dir.parent), "--prompt", "Hello?",
                     "--temperature", "0", "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out == ours + "\n"
