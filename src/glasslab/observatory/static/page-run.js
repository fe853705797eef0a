/* The run page: a live header, links to what the run came from and led to, the band's verdict, then
 * its sections in order. Each section is one idea in one file and plugs in the same way:
 *
 *   G.runSections.add({ id, title, order, draw(body, ctx) })
 *
 * The page draws each into <section id="run-<id>" data-section="<id>"> under an <h2> of its title
 * (a string, or ``title(ctx)`` for one that depends on the run), lowest ``order`` first. ``draw``
 * returns false when it has nothing to show (the section is left out), else nothing or a handler
 * {ready?: Promise (the page is ready once it settles),
 * delta?(delta) (rows the run logged: scalars, vectors, events, samples, status; ``delta.newEvents``
 * are the events not seen before)}. ``ctx``: {d (the page's data), events (the run's events in
 * order, kept current), sync (the charts' cursor-sync key), workspace (workspace.js), actions (what
 * sections offer each other: showMetric(key), showLayer(layer))}. docs/observatory.md lists the
 * sections, their orders and the free slots between them. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt, link, table, statusCell, app, sourced, num, sourceList } = G;
  const LOSS_KEYS = ["train/loss", "sft/loss"];
  const sections = [];

  G.runSections = {
    add(spec) {
      if (sections.some((x) => x.id === spec.id)) throw new Error(`run section ${spec.id} added twice`);
      sections.push(spec);
      sections.sort((a, b) => a.order - b.order);
    },
    list: () => sections.slice(),
  };

  // A step replayed after a resume or rollback logs its samples and events again under a higher
  // attempt (the API already shows each once): keep only the latest of each, as the reader does.
  function dropReplayed(list, fresh, same) {
    const kept = list.filter((old) => old.attempt == null
      || !fresh.some((x) => x !== old && x.attempt != null && x.attempt > old.attempt && same(x, old)));
    list.splice(0, list.length, ...kept);
  }

  // "step 120 of 173 (69%) · 398.6k tokens · …": rebuilt from the summary whenever a delta lands.
  function headerParts(s, rec, src) {
    const parts = [statusCell(s.unreadable ? "unreadable" : s.status)];
    const add = (...xs) => { parts.push(" · ", ...xs); };
    if (rec.size_name) add(rec.size_name);
    if (rec.role) add(rec.role);
    if (s.step != null) {
      const planned = s.planned_steps;
      add(`step ${fmt(s.step, "count")}${planned ? ` of ${fmt(planned, "count")} (${Math.round(100 * Math.min(1, s.step / planned))}%)` : ""}`);
    }
    const part = (key, text) => sourced(el("span", { "data-key": key }, text), src[key]);
    if (s.tokens != null) add(part("train/tokens", `${fmt(s.tokens, "count")} tokens`));
    if (rec.flops != null) add(part("flops", `${fmt(rec.flops, "flops")} FLOPs planned`));
    if (s.loss != null) add(part(s.loss_key || "train/loss", `${s.loss_key || "train/loss"} ${fmt(s.loss)}`));
    if (s.eval_loss != null) add(part("eval/macro/loss", `eval/macro/loss ${fmt(s.eval_loss)}`));
    if (s.tokens_per_second != null) {
      add(part("throughput/tokens_per_second", fmt(s.tokens_per_second, "rate").replace("/s", " tokens/s")));
    }
    return parts;
  }

  function linksLine(d) {
    const L = d.links || {};
    const items = [];
    const add = (label, ...nodes) => items.push(el("span", { class: "run-link" }, `${label} `, ...nodes));
    if (L.dataset) add("dataset", link("data", L.dataset, L.dataset));
    if (L.ladder) add("ladder", link("ladder", L.ladder, d.record.ladder || L.ladder));
    if (L.parent) {
      const name = L.parent.run ? link("run", L.parent.run, L.parent.run) : el("span", {}, L.parent.name || "?");
      add({ sft: "fine-tuned from", dpo: "preference-tuned from" }[d.record.role] || "forked from", name, L.parent.step != null ? ` at step ${fmt(L.parent.step, "count")}` : "");
    }
    if (L.children && L.children.length) {
      add("forks", ...L.children.flatMap((c, i) => [i ? ", " : "", link("run", c.run, c.run),
        c.step != null ? ` (step ${fmt(c.step, "count")})` : ""]));
    }
    if (L.exports && L.exports.length) add("exports", ...L.exports.flatMap((x, i) => [i ? ", " : "", el("a", { href: `#export-${i}` }, x.id)]));
    add("", link("provenance", d.id, "provenance"));
    if (d.has_report) add("", link("data", d.id, "data report"));
    const compare = [d.id, ...(L.parent && L.parent.run ? [L.parent.run] : []), ...(L.children || []).map((c) => c.run)];
    add("", link("compare", null, compare.length > 1 ? "compare with its lineage" : "compare", { runs: compare.join(",") }));
    return el("p", { class: "links" }, ...items.flatMap((x, i) => [i ? " · " : "", x]));
  }

  function verdictLine(v, band) {
    if (!v) return null;
    const cls = v.inside == null ? "verdict pending" : v.inside ? "verdict inside" : "verdict outside";
    return el("p", { class: cls, id: "verdict" },
      el("b", {}, `Pre-registered ${band.target}: `), v.text);
  }

  function reproduceBox(r, d) {
    if (!r || !r.commands.length) return false;
    // Replaying and checking the run: from this very page when it is published, else from the run folder.
    const source = G.STATIC ? location.href : `${d.lab_name || "lab"}/${d.id}`;
    const notes = [el("p", { class: "muted" }, "Replay it and check every published checkpoint (bit-identical, or where it first differs): ",
      el("code", { id: "replay" }, `glasslab reproduce ${source} --lab replay`))];
    if (r.dirty) notes.push(el("p", { class: "warn" }, `The run had uncommitted changes (diff sha256 ${r.diff_sha256 || "?"}); `
      + "the commit alone does not hold its exact code."));
    if (!r.recorded) {
      notes.push(el("p", { class: "muted" }, "run-config.json is the run's resolved config below (secrets redacted: fill them in)."
        + (r.function ? ` The run was step ${r.step_name || "?"} (${r.function}) of an experiment; rerunning that experiment `
          + "at this commit recreates it too (cached unless --force)." : "")));
      notes.push(el("details", {}, el("summary", {}, "run-config.json"), el("pre", {}, JSON.stringify(r.config || {}, null, 2))));
    }
    return [el("pre", { class: "command", id: "reproduce" }, r.commands.join("\n")), ...notes];
  }

  function exportsTable(exports, labName) {
    if (!exports || !exports.length) return null;
    return table(["export", "from step", "status", "max logit difference", "load with transformers"],
      exports.map((x) => [x.id, x.step ?? "", statusCell(x.status),
        x.manifest && x.manifest.max_logit_diff != null ? x.manifest.max_logit_diff : "",
        el("code", {}, `AutoModelForCausalLM.from_pretrained("${labName}/${x.id}")`)]),
      { rowAttrs: (i) => ({ id: `export-${i}` }), units: [null, "count"] });
  }

  // The kept checkpoints (checkpoints.json): hashes anyone can check a download or a replay against.
  function checkpointsTable(checkpoints) {
    if (!checkpoints || !checkpoints.length) return null;
    return table(["step", "tokens", "weights sha256", "export it"],
      checkpoints.map((c) => [c.step, c.tokens ?? "", el("code", { title: c.weights_sha256 || "" }, (c.weights_sha256 || "").slice(0, 16)),
        el("code", {}, c.command)]),
      { rowAttrs: (i) => ({ id: `checkpoint-${checkpoints[i].step}` }), units: ["count", "count"] });
  }

  // The run's latest task accuracies, each with the `glasslab eval` that scores that checkpoint again.
  function taskScoresTable(scores) {
    if (!scores || !scores.length) return null;
    return table(["task", "step", "acc"], scores.map((t) => [t.task, t.step, num(t.value, "percent", t.source)]),
      { class: "task-scores", units: [null, "count"] });
  }

  // `glasslab eval` results of this run's checkpoints and exports: one row per task.
  function evaluationsTable(evaluations) {
    if (!evaluations || !evaluations.length) return null;
    const rows = evaluations.flatMap((e) => Object.entries(e.tasks || {}).map(([name, t]) =>
      [e.id, e.kind === "run" ? "checkpoint" : e.kind || "", e.step ?? "", name, t.items, t.chance, t.acc, t.acc_norm, t.bpb]));
    return table(["evaluation", "of", "step", "task", "items", "chance", "acc", "acc_norm", "bpb"], rows,
      { units: [null, null, "count", null, "count", "percent", "percent", "percent", null] });
  }

  // A sample is text, or (SFT) a conversation: a list of {role, content} as JSON in the prompt. ``spans``
  // (the generated text's traced spans, sample_trace.py) mark the text, or a conversation's last turn.
  function sampleCell(text, spans, key) {
    if (typeof text === "string" && text.startsWith("[")) {
      try {
        const turns = JSON.parse(text);
        if (Array.isArray(turns) && turns.every((t) => t && typeof t.role === "string")) {
          return el("div", { class: "chat" }, ...turns.map((t, i) => el("div", { class: `turn turn-${t.role}` },
            el("b", {}, `${t.role}: `),
            i === turns.length - 1 ? G.tracedText(t.content, spans, key) : el("pre", {}, String(t.content ?? "")))));
        }
      } catch (err) { /* not a conversation: show the text */ }
    }
    return G.tracedText(text, spans, key);
  }

  function drawRun(d) {
    app.append(el("h1", {}, d.title));
    const s = Object.assign({}, d.summary || {});
    const rec = d.record || {};
    const header = el("p", { id: "run-header", class: "run-header" });
    const drawHeader = () => { header.textContent = ""; header.append(...headerParts(s, rec, d.sources || {})); };
    drawHeader();
    app.append(header, linksLine(d));
    const verdict = verdictLine(s.verdict, d.band || {});
    if (verdict) app.append(verdict);
    if (s.unreadable) app.append(el("p", { class: "warn" }, "The run store could not be read right now; showing what is available."));
    G.source.useIndex(d.id, d.series_index);
    const ctx = { d, events: d.events.slice(), sync: `run-${d.id}`, actions: {},
                  workspace: new G.Workspace(`glasslab:${d.lab_name || "lab"}:run`) };
    // Settles once the charts in view are drawn: a section that reads a lot may wait for it.
    ctx.charts = new Promise((resolve) => { ctx.chartsDrawn = resolve; });
    const handlers = [];
    for (const spec of sections) {
      const title = typeof spec.title === "function" ? spec.title(ctx) : spec.title;
      const box = el("section", { id: `run-${spec.id}`, "data-section": spec.id }, el("h2", {}, title));
      const body = el("div", { class: "section-body" });
      box.append(body);
      app.append(box);
      const handler = spec.draw(body, ctx);
      if (handler === false) box.remove();
      else if (handler) handlers.push(handler);
    }
    let livePoints = 0;  // raw points appended since the page was drawn from downsampled data
    return {
      ready: Promise.all(handlers.map((h) => h.ready)),
      delta(runId, delta) {
        if (delta.status) s.status = delta.status;
        for (const [key, step, value] of delta.scalars) {
          if (LOSS_KEYS.includes(key) && (s.step == null || step >= s.step)) { s.step = step; s.loss = value; s.loss_key = key; }
          if (key === "train/tokens") s.tokens = value;
          if (key === "eval/macro/loss") s.eval_loss = value;
          if (key === "throughput/tokens_per_second") s.tokens_per_second = value;
        }
        drawHeader();
        // A page redrawn from fresh data may be sent events it already has: keep each id once.
        delta.newEvents = delta.events.filter((x) => !ctx.events.some((y) => y.id === x.id));
        if (delta.newEvents.length) {
          ctx.events.push(...delta.newEvents);
          dropReplayed(ctx.events, delta.newEvents, (a, b) => a.step != null && a.step === b.step && a.kind === b.kind
            && a.kind !== "resume");
        }
        for (const h of handlers) if (h.delta) h.delta(delta);
        livePoints += delta.scalars.length;
        // A page left open for hours: draw again from the rollups instead of growing without end.
        if (livePoints > 200000) { livePoints = 0; G.source.forget(d.id); G.scheduleRefresh(); }
      },
    };
  }

  G.runSections.add({ id: "reproduce", title: "Reproduce", order: 50, draw(body, ctx) {
    const nodes = reproduceBox(ctx.d.reproduce, ctx.d);
    if (!nodes) return false;
    body.append(...nodes);
  } });

  G.runSections.add({ id: "exports", title: "Exports", order: 60, draw(body, ctx) {
    const t = exportsTable((ctx.d.links || {}).exports, ctx.d.lab_name || "lab");
    if (!t) return false;
    body.append(t);
  } });

  G.runSections.add({ id: "checkpoints", title: "Checkpoints", order: 65, draw(body, ctx) {
    const t = checkpointsTable(ctx.d.checkpoints);
    if (!t) return false;
    body.append(t);
  } });

  G.runSections.add({ id: "task-scores", title: "Task accuracy (latest)", order: 68, draw(body, ctx) {
    const t = taskScoresTable(ctx.d.task_scores);
    if (!t) return false;
    body.append(t);
  } });

  G.runSections.add({ id: "evaluations", title: "Task evaluations (glasslab eval)", order: 70, draw(body, ctx) {
    const t = evaluationsTable((ctx.d.links || {}).evaluations);
    if (!t) return false;
    body.append(t);
  } });

  G.runSections.add({ id: "samples", title: "Samples", order: 80, draw(body, ctx) {
    const d = ctx.d, rec = d.record || {};
    const samples = d.samples.slice();
    // An SFT run's record holds the base model's replies to the same prompts: shown beside each reply.
    const baseReplies = new Map(((rec.base || {}).samples || []).map((x) => [x.prompt, x.text]));
    const parentStep = (rec.parent || {}).step;
    // Spans of each sample found in the training data (by sample id); new samples come with theirs.
    const traced = Object.assign({}, (d.trace || {}).spans);
    const trace = Object.assign({}, d.trace, { spans: traced });
    const drawSamples = () => {
      body.textContent = "";
      const head = ["step", "prompt", "text"];
      if (baseReplies.size) head.push(`base model's reply${parentStep != null ? ` (step ${parentStep})` : ""}`);
      const note = G.traceNote(trace);
      if (note && samples.length) body.append(note);
      body.append(samples.length ? table(head,
        samples.slice().reverse().map((x) => [x.step, sampleCell(x.prompt),
          sampleCell(x.text, traced[x.id], `sample-${x.id}`),
          ...(baseReplies.size ? [sampleCell(baseReplies.get(x.prompt) ?? "")] : [])]),
        { class: "samples" })
        : el("p", { class: "muted" }, "No samples yet."));
    };
    drawSamples();
    return {
      delta(delta) {
        const fresh = delta.samples.filter((x) => !samples.some((y) => y.id === x.id));
        if (!fresh.length) return;
        if (delta.trace) Object.assign(trace, delta.trace, { spans: Object.assign(traced, delta.trace.spans) });
        samples.push(...fresh);
        dropReplayed(samples, fresh, (a, b) => a.step === b.step);
        drawSamples();
      },
    };
  } });

  G.runSections.add({ id: "events", title: "Event timeline", order: 90, draw(body, ctx) {
    const drawEvents = () => {
      body.textContent = "";
      body.append(G.eventsTable(ctx.events.slice().sort((a, b) => a.time - b.time), false, ctx.actions.batchLink));
    };
    drawEvents();
    return { delta(delta) { if (delta.newEvents.length) drawEvents(); } };
  } });

  G.runSections.add({ id: "sources", title: "Where the numbers come from", order: 95, draw(body) {
    const nodes = sourceList();
    if (!nodes) return false;
    body.append(...nodes);
  } });

  window.GlasslabPages.run = drawRun;
})();
