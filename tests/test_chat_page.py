"""The chat panel of `glasslab serve` on a real SFT run, in a real headless Chromium: a message typed, both
replies streamed, the tuned one exactly what `glasslab chat` says; the endpoint's guards; the static site's
recorded replies; the run page's counts and before/after tables."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import httpx
import pytest

from glasslab.config import from_dict
from glasslab.lab import Step, output_of, run_one_step
from glasslab.observatory.app import BackgroundServer, chat_allowed
from glasslab.observatory.chat import BUSY, MAX_NEW_TOKENS, RETRY_AFTER_S, ChatService
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.publish import page_file, publish
from glasslab.posttrain.chat import ChatSession, Sampling, load_chat_model
from glasslab.posttrain.conversations import ConversationsConfig, conversations_step
from glasslab.posttrain.sft import SFTStepConfig, default_sft_train
from glasslab.posttrain.tuning import tune_step
from glasslab.train.run_config import RunConfig
from glasslab.train.steps import TrainStepConfig, train_step
from observatory_lab import CHROMIUM_ARGS, chromium_path, free_port
from train_data import build_tiny_dataset, tiny_run_config

MESSAGE = "What does `os.path.join` do?"


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> dict[str, Path]:
    """A lab with a tiny base run and an 8-step SFT of it (step folders, as `glasslab sft` makes them)."""
    root = tmp_path_factory.mktemp("chatlab") / "lab"
    dataset = build_tiny_dataset(root.parent)
    run_cfg = from_dict(RunConfig, tiny_run_config(dataset, max_steps=30, checkpoint_interval=30, seq_len=64))
    base = run_one_step(Step("base", train_step, TrainStepConfig(run=run_cfg)), root).folder
    data = Step("conversations", conversations_step, ConversationsConfig(builtin_max_modules=20))
    default = default_sft_train()  # 10x its LR: 8 steps at 1e-3 moved no weight by 0.004 (a reply stayed the base's)
    train = dataclasses.replace(default, seq_len=128, global_batch_tokens=128 * 8, max_steps=8,
                                optimizer=dataclasses.replace(default.optimizer, lr=1e-2),
                                checkpoint_interval=8, sample_max_new_tokens=8, eval_max_tokens=256)
    sft = run_one_step(Step("sft", tune_step, SFTStepConfig(train=train, base=f"{base.name}@30",
                                                            conversations_from=output_of(data))),
                       root).folder
    return {"root": root, "base": base, "sft": sft}


def _post(url: str, body: dict, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/api/chat", content=json.dumps(body),
                      headers={"Content-Type": "application/json", **headers}, timeout=60)


def test_the_endpoint_is_on_only_on_loopback_and_refuses_what_it_must(lab):
    assert chat_allowed("127.0.0.1") and chat_allowed("::1") and chat_allowed("localhost")
    assert not chat_allowed("0.0.0.0") and chat_allowed("0.0.0.0", chat=True)
    ask = {"model": lab["sft"].name, "text": "Hi?", "max_new_tokens": 4, "temperature": 0}
    with BackgroundServer(lab["root"], port=free_port()) as server:
        assert _post(server.url, ask, Origin="http://evil.example").status_code == 403
        assert httpx.post(f"{server.url}/api/chat", content="text=Hi", timeout=10).status_code == 415
        for model in ("../../etc", str(lab["sft"]), "nope-00000000", f"{lab['sft'].name}/../x"):
            refused = _post(server.url, {**ask, "model": model})
            assert refused.status_code == 400 and "expected a run of this lab" in refused.json()["error"]
        assert _post(server.url, {**ask, "text": ""}).status_code == 400
        lines = [json.loads(x) for x in _post(server.url, {**ask, "max_new_tokens": 10_000}).text.splitlines()]
        assert lines[-1]["done"] and lines[-1]["tokens"] <= MAX_NEW_TOKENS and lines[-1]["role"] == "sft"
        assert len(lines) > 2 and "".join(x["text"] for x in lines[:-1])  # streamed, piece by piece
    with BackgroundServer(lab["root"], host="0.0.0.0", port=free_port()) as server:
        off = _post(server.url.replace("0.0.0.0", "127.0.0.1"), ask)
        assert off.status_code == 403 and "--chat" in off.json()["error"]


def test_one_generation_at_a_time_and_a_busy_answer_is_a_429_before_any_body(lab):
    """Busy is decided before the response starts: 429 with Retry-After and the error as JSON, never a 200
    whose body says so; the lock is given back once a reply (and its worker) has ended."""
    from starlette.applications import Starlette
    from starlette.routing import Route
    from starlette.testclient import TestClient

    service = ChatService(Lab(lab["root"]), enabled=True)
    client = TestClient(Starlette(routes=[Route("/api/chat", service.endpoint, methods=["POST"])]))
    ask = {"model": lab["sft"].name, "text": "Hi?", "max_new_tokens": 4}
    assert service._busy.acquire(blocking=False)  # as while another page's reply is being generated
    busy = client.post("/api/chat", json=ask)
    assert busy.status_code == 429 and busy.headers["retry-after"] == str(RETRY_AFTER_S)
    assert busy.json() == {"error": BUSY}
    service._busy.release()
    for _ in range(2):  # the lock is free again once a reply has said it is done
        reply = client.post("/api/chat", json=ask)
        assert reply.status_code == 200 and json.loads(reply.text.splitlines()[-1])["done"]
        assert service._busy.acquire(blocking=False)
        service._busy.release()


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
def test_a_message_typed_on_the_page_gets_both_replies_streamed(lab, tmp_path):
    from playwright.sync_api import sync_playwright

    sampled = Sampling(temperature=0.8, top_k=0, top_p=0.9, max_new_tokens=24, seed=0)  # the page's, seed 0
    expected = "".join(ChatSession(load_chat_model(str(lab["sft"])), sampled).reply(MESSAGE))
    expected_base = "".join(ChatSession(load_chat_model(f"{lab['base']}@30"), sampled).reply(MESSAGE))
    assert expected.strip() and expected != expected_base
    with sync_playwright() as p, BackgroundServer(lab["root"], port=free_port()) as server:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        errors, busy_answered = [], []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.url}/run/{lab['sft'].name}")
        page.wait_for_selector("body[data-ready='1']")
        counts = page.locator("table.counts tbody tr").first.inner_text()
        assert counts.startswith("training") and "Post-training: supervised fine-tuning" in page.content()
        assert "eval/sft/loss" in page.locator("table.before-after tbody tr").first.inner_text()
        assert page.locator("select[name='model-base'] option").first.get_attribute("value") == f"{lab['base'].name}@30"
        page.fill("input[name='temperature']", "0.8")
        page.fill("input[name='max_new_tokens']", "24")
        page.evaluate("""() => {  // count the text updates of the tuned reply: a streamed reply has several
            window.__updates = 0;
            const log = document.querySelector(".chat-log[data-side='tuned']");
            new MutationObserver((m) => { window.__updates += m.length; }).observe(
                log, {subtree: true, childList: true, characterData: true});
        }""")
        # The first request finds the server busy (as the endpoint answers then): the page says it waits,
        # sends again after Retry-After, and the reply is the same.
        def busy_once(route) -> None:
            if busy_answered:
                route.continue_()
                return
            busy_answered.append(route.request.url)
            route.fulfill(status=429, headers={"Retry-After": "1", "Content-Type": "application/json"},
                          body=json.dumps({"error": BUSY}))

        page.route("**/api/chat", busy_once)
        page.evaluate("""() => {
            window.__statuses = [];
            const status = document.querySelector(".chat-status");
            new MutationObserver(() => window.__statuses.push(status.textContent)).observe(
                status, {subtree: true, childList: true, characterData: true});
        }""")
        page.fill("textarea[name='message']", MESSAGE)
        page.click("button[name='send']")
        tuned = page.locator(".chat-log[data-side='tuned'] .turn-assistant[data-done='1']")
        tuned.wait_for(timeout=120_000)
        base = page.locator(".chat-log[data-side='base'] .turn-assistant[data-done='1']")
        # Exactly what `glasslab chat` replies with the same settings (the page's text as the browser renders it).
        assert base.locator("pre").evaluate("e => e.textContent") == expected_base
        assert tuned.locator("pre").evaluate("e => e.textContent") == expected
        assert page.evaluate("window.__updates") >= 3  # the user's turn, then the reply piece by piece
        assert "tokens, first after" in tuned.inner_text()
        assert len(busy_answered) == 1 and f"base waits: {BUSY}" in page.evaluate("window.__statuses")
        assert page.locator(".chat-log[data-side='tuned'] .turn-user").inner_text() == f"user: {MESSAGE}"
        page.click("button[name='reset']")
        assert page.locator(".chat-log .turn").count() == 0
        browser.close()
    assert not errors, errors


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed")
def test_the_static_site_shows_the_recorded_replies_and_says_what_a_live_chat_needs(lab, tmp_path):
    from playwright.sync_api import sync_playwright

    site = publish(lab["root"], tmp_path / "site")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto((site.parent / page_file("run", lab["sft"].name)).as_uri())  # publish returns the index
        page.wait_for_selector("body[data-ready='1']")
        assert "needs glasslab serve" in page.locator(".chat-off").inner_text()
        rows = page.locator("table.recorded tbody tr")
        assert rows.count() == 3 and page.locator("textarea").count() == 0
        browser.close()
