/* The run page's batch section: the documents a step's batch held (``/api/batch``, rebuilt on the server
 * and checked against the hash the trainer recorded), for a step typed in, a chart clicked, or an event
 * clicked in the timeline (an incident shows the batch of the attempt it happened in). Live pages of
 * pretraining runs only: a static site has no server to rebuild batches, and post-training batches are
 * not drawn by the pretraining loader. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt, app } = G;
  let showStep = null;  // (step, event row id) => …, of the section drawn last (a refresh draws it again)
  app.addEventListener("click", (ev) => {
    if (!showStep) return;
    const row = ev.target.closest("tr[id^='event-']");
    if (row) {
      const step = Number(row.cells[0].textContent);
      if (step) showStep(step, row.id);
      return;
    }
    const over = ev.target.closest(".u-over");  // a chart's plot area: the step under the cursor
    const plot = over && Object.values(G.charts).find((u) => u && u.over === over);
    const step = plot && plot.cursor.idx != null ? plot.data[0][plot.cursor.idx] : null;
    if (step) showStep(step, null);
  });

  function source(s) {
    if (!s) return "source not recorded";
    const where = ["file", "line", "row", "module", "dataset", "record"].filter((k) => k in s).map((k) => `${k} ${s[k]}`);
    return `${s.source}: ${where.join(" ")}`;
  }

  function drawBatch(box, b) {
    box.textContent = "";
    box.append(el("p", { class: b.matches ? "batch-check ok" : "batch-check bad" },
      `step ${fmt(b.step, "count")} · attempt ${b.attempt} (${b.reason}) · ${b.rows.length} rows of ${b.seq_len + 1} tokens · `
      + (b.matches ? "matches the hash recorded in training" : `does not match the recorded hash ${b.recorded_hash}`)));
    for (const row of b.rows) {
      const pieces = row.pieces.map((p) => el("div", { class: "batch-doc" },
        el("div", { class: "batch-source" }, `document ${p.document} · tokens ${p.offset}–${p.offset + p.tokens} of `
          + `${p.document_tokens} · ${source(p.source)}`),
        el("pre", {}, p.text),
        p.ends_document ? el("div", { class: "batch-end" }, "end of document") : ""));
      box.append(el("div", { class: "batch-row", "data-row": String(row.index) },
        el("h3", {}, `row ${row.index} · ${row.domain}${b.world_size > 1 ? ` · rank ${row.rank}` : ""}`), ...pieces));
    }
  }

  function batchSection(body, ctx) {
    const data = ctx.d;
    const input = el("input", { type: "number", min: "1", name: "batch-step", "aria-label": "step",
                                value: String(data.summary.step || 1) });
    const show = el("button", { type: "button" }, "show batch");
    const box = el("div", { class: "batch-box" });
    body.append(el("div", { class: "controls" }, el("label", {}, "step ", input), show,
      el("span", { class: "muted" }, " or click a chart or an event in the timeline")), box);
    const panel = body.closest("section") || body;
    const load = async (step, attempt) => {
      input.value = String(step);
      box.textContent = "";
      box.append(el("p", { class: "muted" }, `Rebuilding the batch of step ${step}…`));
      const query = { id: data.id, step: String(step), ...(attempt != null ? { attempt: String(attempt) } : {}) };
      try {
        const reply = await fetch(`/api/batch?${new URLSearchParams(query)}`);
        const answer = await reply.json();
        if (!reply.ok) throw new Error(answer.error || reply.statusText);
        drawBatch(box, answer);
      } catch (err) {
        box.textContent = "";
        box.append(el("p", { class: "warn" }, String(err.message || err)));
      }
      panel.dataset.step = String(step);
      // In the address, so a redrawn page shows it again and a link to it can be passed on.
      history.replaceState(null, "", `#batch=${step}${attempt != null ? `@${attempt}` : ""}`);
    };
    show.addEventListener("click", () => load(Number(input.value)));
    showStep = (step, eventRowId) => {
      const event = ctx.events.find((e) => `event-${e.id}` === eventRowId);
      load(step, event && event.attempt != null && event.severity !== "info" ? event.attempt : null);
      panel.scrollIntoView();
    };
    document.body.classList.add("has-batch-panel");
    const asked = /^#batch=(\d+)(?:@(\d+))?$/.exec(location.hash);
    if (asked) load(Number(asked[1]), asked[2] != null ? Number(asked[2]) : null);
  }

  G.runSections.add({
    id: "batch", title: "Batch", order: 35,
    draw(body, ctx) {
      const rec = ctx.d.record || {};
      if (G.STATIC || !rec.dataset || ["sft", "dpo"].includes(rec.role)) return false;
      batchSection(body, ctx);
      return undefined;
    },
  });
})();
