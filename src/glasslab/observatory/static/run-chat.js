/* A post-training run's (SFT, DPO) chat section: the base and the tuned model side by side on the same
 * message, replies streamed by glasslab serve (POST /api/chat, one reply at a time: the two columns
 * answer in turn). On the static site, and wherever the endpoint is off, it shows the replies recorded
 * during the run and says what a live chat needs. Left out for any other run. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt, table } = G;
  const ROLES = ["sft", "dpo"];

  // The replies the run recorded at its last samples, beside the base's to the same prompts; a reply's spans
  // found in the training data highlighted (trace-marks.js).
  function recordedReplies(d, rec) {
    const samples = d.samples || [];
    const lastStep = samples.length ? samples[samples.length - 1].step : null;
    const base = new Map(((rec.base || {}).samples || []).map((x) => [x.prompt, x.text]));
    const traced = (d.trace || {}).spans || {};
    const rows = samples.filter((x) => x.step === lastStep).map((x) => [turnText(x.prompt),
      turnText(base.get(x.prompt) ?? ""), G.tracedText(turnText(x.text), traced[x.id], `reply-${x.id}`)]);
    return rows.length ? table(["message", "base's reply", `reply at step ${lastStep}`], rows, { class: "recorded" })
      : el("p", { class: "muted" }, "No replies recorded yet.");
  }

  function turnText(text) {
    try {
      const turns = JSON.parse(text);
      if (Array.isArray(turns) && turns.length) return String(turns[turns.length - 1].content ?? "");
    } catch (err) { /* plain text */ }
    return String(text ?? "");
  }

  /* One column of the live panel: a model picker, the transcript, and the conversation kept here (the
   * server keeps none: each message goes with the exchanges so far). */
  function column(side, title, models) {
    const select = el("select", { name: `model-${side}`, "aria-label": `${title} model` },
      ...models.map((m) => el("option", { value: m.ref }, m.label)));
    const log = el("div", { class: "chat-log", "data-side": side });
    const box = el("div", { class: "chat-column" }, el("h3", {}, title, " ", select), log);
    return { side, select, log, box, messages: [] };
  }

  // The reply's stream. 429: another reply is being generated (one at a time over the server); say so on
  // ``onWait`` and send again after its Retry-After, a few times, then give its error.
  async function streamReply(payload, onText, onWait) {
    let response;
    for (let attempt = 0; ; attempt += 1) {
      response = await fetch("/api/chat", { method: "POST", headers: { "Content-Type": "application/json" },
                                            body: JSON.stringify(payload) });
      if (response.status !== 429 || attempt >= 20) break;
      const body = await response.json().catch(() => ({}));
      onWait(body.error || "busy");
      const seconds = Number(response.headers.get("Retry-After")) || 1;
      await new Promise((resolve) => setTimeout(resolve, 1000 * seconds));
    }
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      return { error: body.error || `HTTP ${response.status}` };
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "", done = null;
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      buffer += decoder.decode(chunk.value, { stream: true });
      let at;
      while ((at = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, at);
        buffer = buffer.slice(at + 1);
        if (!line) continue;
        const msg = JSON.parse(line);
        if (msg.text != null) onText(msg.text);
        if (msg.done || msg.error) done = msg;
      }
    }
    return done || { error: "the reply ended early" };
  }

  function livePanel(models) {
    const columns = [column("base", "Base", models.base), column("tuned", "Tuned", models.tuned)].filter(
      (c) => c.select.options.length);
    const number = (name, value, step, min, max) => el("input", { type: "number", name, value: String(value),
      step: String(step), min: String(min), ...(max != null ? { max: String(max) } : {}) });
    const temperature = number("temperature", 0.7, 0.1, 0, 5), topK = number("top_k", 0, 1, 0);
    const topP = number("top_p", 0.9, 0.05, 0.05, 1), maxTokens = number("max_new_tokens", 128, 16, 1, 512);
    const input = el("textarea", { name: "message", rows: "2", placeholder: "Ask both models something…",
                                   "aria-label": "message" });
    const send = el("button", { type: "submit", name: "send" }, "Send");
    const reset = el("button", { type: "button", name: "reset" }, "Reset");
    const status = el("span", { class: "muted small chat-status" });
    const form = el("form", { class: "chat-form" }, input, send, reset, status);
    const controls = el("div", { class: "controls chat-controls" },
      el("label", {}, "temperature ", temperature), el("label", {}, "top-k ", topK), el("label", {}, "top-p ", topP),
      el("label", {}, "max tokens ", maxTokens),
      el("span", { class: "muted small" }, "Replies stream from this server, one at a time (the columns answer in "
        + "turn); each keeps its own conversation. Temperature 0 is greedy."));
    const turn = (log, role, text) => {
      const body = el("pre", {}, text);
      const node = el("div", { class: `turn turn-${role}` }, el("b", {}, `${role}: `), body);
      log.append(node);
      log.scrollTop = log.scrollHeight;
      return { node, body };
    };
    let busy = false;
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const text = input.value.trim();
      if (!text || busy) return;
      busy = true;
      send.disabled = true;
      input.value = "";
      try {
        for (const c of columns) turn(c.log, "user", text);
        for (const c of columns) {
          status.textContent = `${c.side} is replying…`;
          const reply = turn(c.log, "assistant", "");
          let shown = "";
          const done = await streamReply({
            model: c.select.value, text, messages: c.messages, temperature: Number(temperature.value),
            top_k: Number(topK.value), top_p: Number(topP.value), max_new_tokens: Number(maxTokens.value),
          }, (piece) => {
            shown += piece;
            reply.body.textContent = shown;
            status.textContent = `${c.side} is replying…`;
          }, (why) => { status.textContent = `${c.side} waits: ${why}`; });
          if (done.error) {
            reply.node.classList.add("error");
            reply.body.textContent = `(${done.error})`;
          } else {
            c.messages.push({ role: "user", content: text }, { role: "assistant", content: shown });
            // The reply's spans found in the training data (when the lab holds its dataset's index).
            if (done.trace && done.trace.length) {
              reply.body.replaceWith(G.tracedText(shown, done.trace, `chat-${c.side}-${c.messages.length}`));
            }
            const rate = done.seconds > (done.first_token_s || 0) && done.tokens > 1
              ? `, ${fmt((done.tokens - 1) / (done.seconds - done.first_token_s), "rate")} tokens` : "";
            reply.node.append(el("span", { class: "muted small chat-meta" },
              ` ${done.model} · ${done.tokens} tokens, first after ${Math.round(1000 * (done.first_token_s || 0))} ms${rate}`));
          }
          reply.node.dataset.done = "1";
        }
        status.textContent = "";
      } finally {
        busy = false;
        send.disabled = false;
      }
    });
    reset.addEventListener("click", () => {
      for (const c of columns) { c.messages = []; c.log.textContent = ""; }
      status.textContent = "conversation reset";
    });
    for (const c of columns) c.select.addEventListener("change", () => { c.messages = []; c.log.textContent = ""; });
    return el("div", { class: "chat-panel" }, controls, el("div", { class: "chat-columns" }, ...columns.map((c) => c.box)),
              form);
  }

  const live = (d) => !G.STATIC && G.BOOT.chat && d.chat_models;

  G.runSections.add({
    id: "chat", order: 75,
    title: (ctx) => (live(ctx.d) ? "Chat: the base and the tuned model side by side" : "Chat"),
    draw(body, ctx) {
      const d = ctx.d, rec = d.record || {};
      if (!ROLES.includes(rec.role)) return false;
      if (live(d)) {
        body.append(livePanel(d.chat_models));
        return null;
      }
      const why = G.STATIC ? "A live chat with these models needs glasslab serve (on this machine's loopback, or with "
        + "--chat); here are the replies recorded during the run."
        : "The chat panel is off: this server does not listen on loopback (glasslab serve --chat turns it on). "
        + "Here are the replies recorded during the run.";
      body.append(el("p", { class: "muted chat-off" }, why), recordedReplies(d, rec));
      return null;
    },
  });
})();
