/* The run page's batch section: the documents a step's batch held, for a step typed in, a chart clicked,
 * or an event of the timeline (its step cell links to the event's batch: ``event.batch``, which
 * ``batch_view.py`` sets, so an incident shows the batch of the attempt it happened in).
 * Live: ``/api/batch`` rebuilds any step on the server and checks it against the hash the trainer
 * recorded. Static site: no server, so the publisher rebuilt a fixed set ahead (step 1, steps evenly
 * spaced over the run, every incident's step), texts cut; the run's batch index script names their
 * files, and any other step shows the ``glasslab batch`` command that rebuilds it.
 * Every way in goes through the address (``#batch=STEP[@ATTEMPT]``), so a link to a batch can be
 * passed on. Pretraining runs only: post-training batches are not drawn by the pretraining loader. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt, app } = G;
  let showStep = null;  // (step, attempt) => …, of the section drawn last (a refresh draws it again)
  const hashOf = (step, attempt) => `#batch=${step}${attempt != null ? `@${attempt}` : ""}`;
  const asked = () => {
    const m = /^#batch=(\d+)(?:@(\d+))?$/.exec(location.hash);
    return m ? { step: Number(m[1]), attempt: m[2] != null ? Number(m[2]) : null } : null;
  };

  window.addEventListener("hashchange", () => {
    const target = asked();
    if (showStep && target) showStep(target.step, target.attempt, true);
  });
  app.addEventListener("click", (ev) => {
    if (!showStep || ev.target.closest("a")) return;  // a link to a batch goes through the address
    const row = ev.target.closest("tr[id^='event-']");
    if (row) {
      const link = row.querySelector("a.batch-link");
      if (link) location.hash = link.getAttribute("href");
      return;
    }
    const over = ev.target.closest(".u-over");  // a chart's plot area: the step under the cursor
    const plot = over && Object.values(G.charts).find((u) => u && u.over === over);
    const step = plot && plot.cursor.idx != null ? plot.data[0][plot.cursor.idx] : null;
    if (step) location.hash = hashOf(step, null);
  });

  function source(s) {
    if (!s) return "source not recorded";
    const where = ["file", "line", "row", "module", "dataset", "record"].filter((k) => k in s).map((k) => `${k} ${s[k]}`);
    return `${s.source}: ${where.join(" ")}`;
  }

  function drawBatch(box, b) {
    box.textContent = "";
    box.append(el("p", { class: b.matches ? "batch-check ok" : "batch-check bad" },
      `step ${fmt(b.step, "count")} · attempt ${b.attempt} (${b.reason}) · ${b.rows.length + (b.rows_left_out || 0)} rows of ${b.seq_len + 1} tokens · `
      + (b.matches ? "matches the hash recorded in training" : `does not match the recorded hash ${b.recorded_hash}`)));
    if (b.rows_left_out) {
      box.append(el("p", { class: "muted" }, `The first ${b.rows.length} rows; ${fmt(b.rows_left_out, "count")} more are left out of the `
        + `published page (glasslab batch ${b.run} ${b.step} prints them).`));
    }
    for (const row of b.rows) {
      const pieces = row.pieces.map((p) => el("div", { class: "batch-doc" },
        el("div", { class: "batch-source" }, `document ${p.document} · tokens ${p.offset}–${p.offset + p.tokens} of `
          + `${p.document_tokens} · ${source(p.source)}`),
        el("pre", {}, p.text),
        p.text_cut ? el("div", { class: "batch-cut" }, `… ${fmt(p.text_cut, "count")} more characters`) : "",
        p.ends_document ? el("div", { class: "batch-end" }, "end of document") : ""));
      box.append(el("div", { class: "batch-row", "data-row": String(row.index) },
        el("h3", {}, `row ${row.index} · ${row.domain}${b.world_size > 1 ? ` · rank ${row.rank}` : ""}`), ...pieces));
    }
  }

  class NotPublished extends Error {}

  async function fetchLive(data, step, attempt) {
    const query = { id: data.id, step: String(step), ...(attempt != null ? { attempt: String(attempt) } : {}) };
    const reply = await fetch(`/api/batch?${new URLSearchParams(query)}`);
    const answer = await reply.json();
    if (!reply.ok) throw new Error(answer.error || reply.statusText);
    return answer;
  }

  // The static site's index of published batches (publish.py), loaded once.
  async function staticIndex(data) {
    await G.source.loadOnce(data.batch_index);
    return (window.GLASSLAB_BATCH_INDEX || {})[data.id];
  }

  async function fetchStatic(data, step, attempt) {
    const index = await staticIndex(data);
    const chosen = attempt != null ? attempt : index.in_force[String(step)];
    const file = index.files[`${step}@${chosen}`];
    if (!file) throw new NotPublished(index.error || "");
    await G.source.loadOnce(file);
    return window.GLASSLAB_BATCHES[file];
  }

  // What a reader of the static site runs beside the lab for a batch the site does not carry.
  function commandFor(data, step, attempt) {
    return `glasslab batch ${data.id} ${step}${attempt != null ? ` --attempt ${attempt}` : ""}`;
  }

  function notPublished(data, step, attempt, why) {
    return [el("p", { class: "muted" }, why ? `This site could not rebuild the run's batches: ${why}`
      : `The batch of step ${fmt(step, "count")} is not published with this page. Rebuild it (and check it against the `
        + "hash recorded in training) in the lab, with the run's dataset:"),
    el("pre", { class: "command batch-command" }, commandFor(data, step, attempt))];
  }

  // The published batches as links, and what was cut from them.
  async function publishedLine(data) {
    const index = await staticIndex(data);
    const published = Object.keys(index.files).map((k) => k.split("@").map(Number)).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    if (!published.length) return el("p", { class: "muted" }, index.error || "No batches are published with this page.");
    const links = published.flatMap(([step, attempt], i) => [i ? ", " : "",
      el("a", { href: hashOf(step, index.in_force[String(step)] === attempt ? null : attempt) },
        index.in_force[String(step)] === attempt ? String(step) : `${step} (attempt ${attempt})`)]);
    return el("p", { class: "muted batch-published" }, `Published batches: step 1, ${index.evenly_spaced} steps evenly spaced over the run, `
      + "and the step of every warning, incident, resume and fork: ", ...links,
      `. Each document piece is cut at ${index.text_chars.toLocaleString("en-US")} characters and each batch at its first `
      + `${fmt(index.rows, "count")} rows; other steps give the command that rebuilds them.`);
  }

  function batchSection(body, ctx) {
    const data = ctx.d;
    const input = el("input", { type: "number", min: "1", name: "batch-step", "aria-label": "step",
                                value: String(data.summary.step || 1) });
    const show = el("button", { type: "button" }, "show batch");
    const box = el("div", { class: "batch-box" });
    body.append(el("div", { class: "controls" }, el("label", {}, "step ", input), show,
      el("span", { class: "muted" }, " or click a chart or an event's step in the timeline")));
    if (G.STATIC) {
      const line = el("div", {});
      body.append(line);
      publishedLine(data).then((p) => line.append(p), (err) => line.append(el("p", { class: "warn" }, String(err.message || err))));
    }
    body.append(box);
    const panel = body.closest("section") || body;
    const load = async (step, attempt) => {
      input.value = String(step);
      box.textContent = "";
      box.append(el("p", { class: "muted" }, G.STATIC ? `Loading the batch of step ${step}…` : `Rebuilding the batch of step ${step}…`));
      try {
        drawBatch(box, await (G.STATIC ? fetchStatic : fetchLive)(data, step, attempt));
      } catch (err) {
        box.textContent = "";
        if (err instanceof NotPublished) box.append(...notPublished(data, step, attempt, err.message));
        else box.append(el("p", { class: "warn" }, String(err.message || err)));
      }
      panel.dataset.step = String(step);
      // In the address, so a redrawn page shows it again and a link to it can be passed on.
      if (location.hash !== hashOf(step, attempt)) history.replaceState(null, "", hashOf(step, attempt));
    };
    show.addEventListener("click", () => load(Number(input.value), null));
    showStep = (step, attempt, scroll) => {
      load(step, attempt);
      if (scroll) panel.scrollIntoView();
    };
    // The timeline's step cells: a link to each event's batch.
    ctx.actions.batchLink = (event) => (event.batch ? el("a", { class: "batch-link", href: hashOf(event.batch.step, event.batch.attempt),
      title: `the batch of step ${event.batch.step}${event.batch.attempt != null ? ` as attempt ${event.batch.attempt} drew it` : ""}` },
    fmt(event.step)) : null);
    document.body.classList.add("has-batch-panel");
    const target = asked();
    if (target) load(target.step, target.attempt);
  }

  G.runSections.add({
    id: "batch", title: "Batch", order: 35,
    draw(body, ctx) {
      const rec = ctx.d.record || {};
      if (!rec.dataset || ["sft", "dpo"].includes(rec.role) || (G.STATIC && !ctx.d.batch_index)) return false;
      batchSection(body, ctx);
      return undefined;
    },
  });
})();
