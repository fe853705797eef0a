/* The run page: a live header, links to what the run came from and led to, the band's verdict,
 * charts by panel (hover synced across them), MoE layers with linked heatmaps, the command that
 * recreates the run, exports, samples and the event timeline. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt, link, table, section, statusCell, app } = G;
  const { LineChart, Heatmap, upsert } = window.GlasslabCharts;
  const { unitOf } = window.GlasslabFormat;
  const LOSS_KEYS = ["train/loss", "sft/loss"];

  // A step replayed after a resume or rollback logs its samples and events again under a higher
  // attempt (the API already shows each once): keep only the latest of each, as the reader does.
  function dropReplayed(list, fresh, same) {
    const kept = list.filter((old) => old.attempt == null
      || !fresh.some((x) => x !== old && x.attempt != null && x.attempt > old.attempt && same(x, old)));
    list.splice(0, list.length, ...kept);
  }

  // "step 120 of 173 (69%) · 398.6k tokens · …": rebuilt from the summary whenever a delta lands.
  function headerParts(s, rec) {
    const parts = [statusCell(s.unreadable ? "unreadable" : s.status)];
    const add = (...xs) => { parts.push(" · ", ...xs); };
    if (rec.size_name) add(rec.size_name);
    if (rec.role) add(rec.role);
    if (s.step != null) {
      const planned = s.planned_steps;
      add(`step ${fmt(s.step, "count")}${planned ? ` of ${fmt(planned, "count")} (${Math.round(100 * Math.min(1, s.step / planned))}%)` : ""}`);
    }
    if (s.tokens != null) add(`${fmt(s.tokens, "count")} tokens`);
    if (s.loss != null) add(`${s.loss_key || "train/loss"} ${fmt(s.loss)}`);
    if (s.eval_loss != null) add(`eval/macro/loss ${fmt(s.eval_loss)}`);
    if (s.tokens_per_second != null) add(fmt(s.tokens_per_second, "rate").replace("/s", " tokens/s"));
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
    if (!r || !r.commands.length) return null;
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
    return section("Reproduce", el("pre", { class: "command", id: "reproduce" }, r.commands.join("\n")), ...notes);
  }

  function exportsSection(exports, labName) {
    if (!exports || !exports.length) return;
    section("Exports", table(["export", "from step", "status", "max logit difference", "load with transformers"],
      exports.map((x) => [x.id, x.step ?? "", statusCell(x.status),
        x.manifest && x.manifest.max_logit_diff != null ? x.manifest.max_logit_diff : "",
        el("code", {}, `AutoModelForCausalLM.from_pretrained("${labName}/${x.id}")`)]),
      { rowAttrs: (i) => ({ id: `export-${i}` }), units: [null, "count"] }));
  }

  // The kept checkpoints (checkpoints.json): hashes anyone can check a download or a replay against.
  function checkpointsSection(checkpoints) {
    if (!checkpoints || !checkpoints.length) return;
    section("Checkpoints", table(["step", "tokens", "weights sha256", "export it"],
      checkpoints.map((c) => [c.step, c.tokens ?? "", el("code", { title: c.weights_sha256 || "" }, (c.weights_sha256 || "").slice(0, 16)),
        el("code", {}, c.command)]),
      { rowAttrs: (i) => ({ id: `checkpoint-${checkpoints[i].step}` }), units: ["count", "count"] }));
  }

  // `glasslab eval` results of this run's checkpoints and exports: one row per task.
  function evaluationsSection(evaluations) {
    if (!evaluations || !evaluations.length) return;
    const rows = evaluations.flatMap((e) => Object.entries(e.tasks || {}).map(([name, t]) =>
      [e.id, e.kind === "run" ? "checkpoint" : e.kind || "", e.step ?? "", name, t.items, t.chance, t.acc, t.acc_norm, t.bpb]));
    section("Task evaluations (glasslab eval)", table(
      ["evaluation", "of", "step", "task", "items", "chance", "acc", "acc_norm", "bpb"], rows,
      { units: [null, null, "count", null, "count", "percent", "percent", "percent", null] }));
  }

  // A sample is text, or (SFT) a conversation: a list of {role, content} as JSON in the prompt.
  function sampleCell(text) {
    if (typeof text === "string" && text.startsWith("[")) {
      try {
        const turns = JSON.parse(text);
        if (Array.isArray(turns) && turns.every((t) => t && typeof t.role === "string")) {
          return el("div", { class: "chat" }, ...turns.map((t) => el("div", { class: `turn turn-${t.role}` },
            el("b", {}, `${t.role}: `), el("pre", {}, String(t.content ?? "")))));
        }
      } catch (err) { /* not a conversation: show the text */ }
    }
    return el("pre", {}, text);
  }

  function drawRun(d) {
    app.append(el("h1", {}, d.title));
    const s = Object.assign({}, d.summary || {});
    const rec = d.record || {};
    const header = el("p", { id: "run-header", class: "run-header" });
    const drawHeader = () => { header.textContent = ""; header.append(...headerParts(s, rec)); };
    drawHeader();
    app.append(header, linksLine(d));
    const verdict = verdictLine(s.verdict, d.band || {});
    if (verdict) app.append(verdict);
    if (s.unreadable) app.append(el("p", { class: "warn" }, "The run store could not be read right now; showing what is available."));
    window.GlasslabPosttrain(d);  // SFT, DPO: data counts, before and after, the chat panel (page-chat.js)
    const events = d.events.slice();
    const charts = {};   // key -> [chart, line index]
    let livePoints = 0;  // raw points appended since the page was drawn from downsampled data
    const sync = `run-${d.id}`;
    const grid = section("Charts", el("div", { class: "grid" })).lastChild;
    for (const panel of d.panels) {
      const lines = panel.keys.map((key) => {
        const series = d.series[key] || { steps: [], values: [] };
        return { label: key, xs: series.steps.slice(), ys: series.values.slice(),
                 lo: series.min ? series.min.slice() : null, hi: series.max ? series.max.slice() : null };
      });
      const band = d.band;
      if (band && band.curve.length && panel.keys.includes(band.target)) {
        lines.push({ label: "pre-registered prediction", bandLabel: "prediction band", color: "#ff7f0e", dash: [6, 4],
          xs: band.curve.map((c) => c.step), ys: band.curve.map((c) => c.point),
          lo: band.curve.map((c) => c.lo), hi: band.curve.map((c) => c.hi) });
      }
      // One dashed line per chance level, naming the tasks at it.
      const levels = {};
      for (const k of panel.keys.filter((key) => d.chance[key] != null)) (levels[d.chance[k]] ||= []).push(k.split("/")[2] || k);
      const hlines = Object.entries(levels).map(([y, tasks]) => ({ y: Number(y),
        label: `chance ${fmt(Number(y), "percent")} (${tasks.join(", ")})` }));
      const chart = new LineChart(grid, { title: panel.title, lines, logy: panel.logy, unit: unitOf(panel.keys[0]),
                                          events: () => events, sync, hlines });
      chart.root.dataset.panel = panel.title;
      G.charts[panel.title] = chart.plot;
      panel.keys.forEach((key, i) => { charts[key] = [chart, i]; });
    }
    if (!d.panels.length) grid.append(el("p", { class: "muted" }, "Nothing logged yet."));
    const moe = d.layers.length ? drawLayers(d, sync, events) : null;
    reproduceBox(d.reproduce, d);
    exportsSection((d.links || {}).exports, d.lab_name || "lab");
    checkpointsSection(d.checkpoints);
    evaluationsSection((d.links || {}).evaluations);
    const samplesBox = section("Samples", el("div", {})).lastChild;
    const samples = d.samples.slice();
    // An SFT run's record holds the base model's replies to the same prompts: shown beside each reply.
    const baseReplies = new Map(((rec.base || {}).samples || []).map((x) => [x.prompt, x.text]));
    const parentStep = (rec.parent || {}).step;
    const drawSamples = () => {
      samplesBox.textContent = "";
      const head = ["step", "prompt", "text"];
      if (baseReplies.size) head.push(`base model's reply${parentStep != null ? ` (step ${parentStep})` : ""}`);
      samplesBox.append(samples.length ? table(head,
        samples.slice().reverse().map((x) => [x.step, sampleCell(x.prompt), sampleCell(x.text),
          ...(baseReplies.size ? [sampleCell(baseReplies.get(x.prompt) ?? "")] : [])]),
        { class: "samples" })
        : el("p", { class: "muted" }, "No samples yet."));
    };
    drawSamples();
    const eventsBox = section("Event timeline", el("div", {})).lastChild;
    const drawEvents = () => {
      eventsBox.textContent = "";
      eventsBox.append(G.eventsTable(events.slice().sort((a, b) => a.time - b.time), false));
    };
    drawEvents();
    return {
      delta(runId, delta) {
        let unknown = false;
        if (delta.status) s.status = delta.status;
        for (const [key, step, value] of delta.scalars) {
          if (LOSS_KEYS.includes(key) && (s.step == null || step >= s.step)) { s.step = step; s.loss = value; s.loss_key = key; }
          if (key === "train/tokens") s.tokens = value;
          if (key === "eval/macro/loss") s.eval_loss = value;
          if (key === "throughput/tokens_per_second") s.tokens_per_second = value;
          const hit = charts[key];
          if (hit) hit[0].add(hit[1], step, value); else if (!key.startsWith("moe/layer_") || !moe) unknown = true;
          if (moe) moe.scalar(key, step, value);
        }
        drawHeader();
        livePoints += delta.scalars.length;
        // A page left open for hours: draw again from the rollups instead of growing without end.
        if (livePoints > 200000) { livePoints = 0; unknown = true; }
        for (const [key, step, values] of delta.vectors) {
          if (moe && moe.vector(key, step, values)) continue;
          unknown = true;
        }
        // A page redrawn from fresh data may be sent rows it already has: keep each id once.
        const newSamples = delta.samples.filter((x) => !samples.some((y) => y.id === x.id));
        if (newSamples.length) {
          samples.push(...newSamples);
          dropReplayed(samples, newSamples, (a, b) => a.step === b.step);
          drawSamples();
        }
        const newEvents = delta.events.filter((x) => !events.some((y) => y.id === x.id));
        if (newEvents.length) {
          events.push(...newEvents);
          dropReplayed(events, newEvents, (a, b) => a.step != null && a.step === b.step && a.kind === b.kind
            && a.kind !== "resume");
          drawEvents();
          for (const [chart] of Object.values(charts)) chart.plot.redraw(false, true);
        }
        if (unknown) G.scheduleRefresh();  // a new metric appeared: lay the panels out again
      },
    };
  }

  /* MoE layers, one at a time: the router-bias norm line and the expert-load and router-bias
   * heatmaps, linked by hover (the line's cursor marks the heatmaps' column and names the experts
   * that lead there; a heatmap's hover moves every chart's cursor to its step). */
  function drawLayers(d, sync, events) {
    const box = section("MoE layers: expert load and router bias").lastChild;
    const select = el("select", { name: "layer", "aria-label": "MoE layer" },
      ...d.layers.map((i) => el("option", { value: String(i) }, `layer ${i}`)));
    const body = el("div", { class: "grid moe-layer" });
    box.append(el("div", { class: "controls" }, el("label", {}, "layer ", select),
      el("span", { class: "muted" }, "Hover a chart or a heatmap: the other follows, and the experts with the "
        + "largest values at that step are named.")), body);
    const scalars = (layer) => [`moe/layer_${layer}/router_bias_norm`].filter((k) => d.series[k]);
    let current = null;
    const show = (layer) => {
      body.textContent = "";
      const heat = {};
      const keys = scalars(layer);
      const highlight = (step) => { for (const h of Object.values(heat)) h.highlight(step); };
      const line = keys.length ? new LineChart(body, {
        title: `Layer ${layer}: router bias norm`, sync, events: () => events, onCursor: highlight, height: 200,
        lines: keys.map((k) => ({ label: k, xs: d.series[k].steps.slice(), ys: d.series[k].values.slice() })),
      }) : null;
      if (line) G.charts[`moe-layer`] = line.plot;
      for (const [kind, title] of [["expert_load", "expert load (share of routed tokens)"],
                                   ["router_bias", "router bias (signed; 0 is white)"]]) {
        const key = `moe/layer_${layer}/${kind}`;
        const v = d.vectors[key];
        if (!v) continue;
        heat[key] = new Heatmap(body, { title: `Layer ${layer}: ${title}`, key, steps: v.steps, values: v.values,
          signed: kind === "router_bias" ? true : null, onHover: (step) => line && line.hoverAt(step) });
      }
      current = { layer, line, keys, heat };
    };
    select.addEventListener("change", () => show(Number(select.value)));
    show(d.layers[0]);
    return {
      scalar(key, step, value) {
        const series = d.series[key];
        if (series && key.startsWith("moe/layer_")) upsert({ xs: series.steps, ys: series.values }, step, value);
        if (current && current.line) {
          const i = current.keys.indexOf(key);
          if (i >= 0) current.line.add(i, step, value);  // the line keeps its own copy of the points
        }
      },
      vector(key, step, values) {
        if (!key.startsWith("moe/layer_")) return false;
        // Kept for a later switch of layer; the heatmap on show keeps its own copy.
        const v = d.vectors[key] || (d.vectors[key] = { steps: [], values: [] });
        const i = v.steps.indexOf(step);
        if (i >= 0) v.values[i] = values;
        else if (!v.steps.length || step > v.steps[v.steps.length - 1]) { v.steps.push(step); v.values.push(values); }
        if (current && current.heat[key]) current.heat[key].add(step, values);
        return true;
      },
    };
  }

  window.GlasslabPages.run = drawRun;
})();
