/* glasslab observatory pages: draw each page from its data, then follow it live.
 * Live site: data from /api/page, updates from one EventSource per page (polling /api/delta with the
 * cursor while the stream is down). Static site: data from a script that set GLASSLAB_DATA. */
(function () {
  "use strict";
  const { el, fmt, LineChart, Heatmap } = window.GlasslabCharts;
  const BOOT = window.GLASSLAB_BOOT;
  const STATIC = BOOT.mode === "static";
  const app = document.getElementById("app");
  window.GLASSLAB_CHARTS = {};

  function href(page, id) {
    if (STATIC) {
      const links = (window.GLASSLAB_SITE || {}).links || {};
      return links[id == null ? page : `${page}:${id}`] || null;
    }
    if (page === "overview") return "/";
    if (page === "compare") return id ? `/compare?runs=${encodeURIComponent(id)}` : "/compare";
    return `/${page}/${String(id).split("/").map(encodeURIComponent).join("/")}`;
  }

  function link(page, id, text) {
    const target = href(page, id);
    return target ? el("a", { href: target }, text) : el("span", {}, text);
  }

  function table(headers, rows, rowAttrs) {
    const head = el("tr", {}, ...headers.map((h) => el("th", {}, h)));
    const body = rows.map((row, i) => el("tr", rowAttrs ? rowAttrs(i) : {},
      ...row.map((cell) => (cell instanceof Node ? el("td", {}, cell)
        : el("td", { class: typeof cell === "number" ? "num" : null }, typeof cell === "number" ? fmt(cell) : cell)))));
    return el("table", {}, head, ...body);
  }

  function section(title, ...children) {
    const s = el("section", {}, el("h2", {}, title), ...children);
    app.appendChild(s);
    return s;
  }

  function nav() {
    const n = document.getElementById("nav");
    n.textContent = "";
    n.append(link("overview", null, "overview"), link("compare", null, "compare"));
  }

  function setLive(on) {
    const badge = document.getElementById("live");
    badge.className = on ? "live-on" : "live-off";
    badge.textContent = STATIC ? "snapshot" : on ? "live" : "reconnecting…";
  }

  async function loadData() {
    if (STATIC) return window.GLASSLAB_DATA;
    const params = new URLSearchParams(BOOT.query || {});
    if (BOOT.id != null) params.set("id", BOOT.id);
    const response = await fetch(`/api/page/${BOOT.page}?${params}`, { cache: "no-store" });
    if (!response.ok) throw new Error(`${response.status} ${await response.text()}`);
    return response.json();
  }

  /* One stream per page. On error: close it, poll /api/delta with our cursor until the server
   * answers (a restart), then reopen the stream; after repeated stream failures keep polling. */
  function follow(data, handler) {
    if (STATIC) { setLive(false); return; }
    let cursors = data.cursors || {};
    let failures = 0, labStamp = null;
    const query = () => {
      const params = new URLSearchParams(BOOT.query || {});
      params.set("page", BOOT.page);
      if (BOOT.id != null) params.set("id", BOOT.id);
      params.set("cursor", JSON.stringify(cursors));
      return params;
    };
    const apply = (msg) => {
      if (msg.cursors) cursors = Object.assign(cursors, msg.cursors);
      for (const [runId, delta] of Object.entries(msg.runs || {})) handler.delta(runId, delta);
    };
    const open = () => {
      const source = new EventSource(`/api/stream?${query()}`);
      source.addEventListener("hello", () => { failures = 0; setLive(true); });
      source.addEventListener("delta", (e) => apply(JSON.parse(e.data)));
      source.addEventListener("lab", () => handler.lab && handler.lab());
      source.onerror = () => { source.close(); setLive(false); failures += 1; setTimeout(poll, 500); };
    };
    const poll = async () => {
      try {
        const response = await fetch(`/api/delta?${query()}`, { cache: "no-store" });
        if (!response.ok) throw new Error(String(response.status));
        const msg = await response.json();
        apply(msg);
        if (labStamp !== null && msg.lab !== labStamp && handler.lab) handler.lab();
        labStamp = msg.lab;
        if (failures < 4) open(); else setTimeout(poll, 1000);
      } catch (err) {
        setTimeout(poll, Math.min(4000, 500 * failures));
      }
    };
    if (window.EventSource) open(); else { failures = 4; poll(); }  // no streams here: poll only
  }

  // Re-fetch and redraw the whole page at most once a second (overview, data: files changed).
  let refreshTimer = null;
  function scheduleRefresh() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(async () => {
      refreshTimer = null;
      try { draw(await loadData(), false); } catch (err) { /* keep the page as it is */ }
    }, 1000);
  }

  function statusCell(status) { return el("span", { class: `status-${status}` }, status || "–"); }

  function drawOverview(d) {
    app.append(el("h1", {}, d.title));
    section("Runs", d.runs.length ? table(
      ["run", "status", "role", "ladder", "size", "step", "train loss", "tokens", "eval loss", "predicted", ""],
      d.runs.map((r) => [link("run", r.id, r.id), statusCell(r.unreadable ? "unreadable" : r.status),
        r.role || "", r.ladder || "", r.size_name || "", r.step ?? "", r.loss, r.tokens, r.eval_loss,
        r.predicted ? `${fmt(r.predicted.point)} [${fmt(r.predicted.lo)}, ${fmt(r.predicted.hi)}]` : "",
        link("provenance", r.id, "provenance")])) : el("p", { class: "muted" }, "No runs yet."));
    if (d.ladders.length) section("Ladders", table(["ladder", "target", "rungs", "prediction", "hero", ""],
      d.ladders.map((l) => [link("ladder", l.id, l.ladder || l.id), l.target || "", l.rungs,
        l.prediction ? `${fmt(l.prediction.point)} [${fmt(l.prediction.lo)}, ${fmt(l.prediction.hi)}] at ${fmt(l.prediction.flops)} FLOPs` : "",
        l.hero_run ? link("run", l.hero_run, l.hero_run) : "",
        l.runs.length ? link("compare", STATIC ? null : l.runs.join(","), "compare its runs") : ""])));
    if (d.reports.length) section("Data", el("ul", {}, ...d.reports.map((id) => el("li", {}, link("data", id, id)))));
    if (d.steps.length) section("Steps", table(["step folder", "name", "status", "attempts", "error"],
      d.steps.map((s) => [s.is_run ? link("run", s.id, s.id) : s.is_report ? link("data", s.id, s.id) : s.id,
        s.name || "", statusCell(s.status),
        s.attempts ?? "", s.error ? String(s.error).slice(0, 300) : ""])));
    section("Lab events", eventsTable(d.events.slice().reverse(), true));
    return { lab: scheduleRefresh };
  }

  // A step replayed after a resume or rollback logs its samples and events again under a higher
  // attempt (the API already shows each once): keep only the latest of each, as the reader does.
  function dropReplayed(list, fresh, same) {
    const kept = list.filter((old) => old.attempt == null
      || !fresh.some((x) => x !== old && x.attempt != null && x.attempt > old.attempt && same(x, old)));
    list.splice(0, list.length, ...kept);
  }

  function eventsTable(events, lab) {
    if (!events.length) return el("p", { class: "muted" }, "No events.");
    const headers = lab ? ["time", "kind", "subject", "title", "body"] : ["step", "time", "kind", "title", "body"];
    return table(headers, events.map((e) => {
      const when = new Date(e.time * 1000).toISOString().replace("T", " ").slice(0, 19);
      return lab ? [when, e.kind, e.subject, e.title, e.body] : [e.step ?? "", when, e.kind, e.title, e.body];
    }), (i) => ({ id: `event-${events[i].id}`, class: `sev-${events[i].severity}` }));
  }

  function drawRun(d) {
    app.append(el("h1", {}, d.title));
    const s = d.summary || {};
    const rec = d.record || {};
    app.append(el("p", {}, "status ", statusCell(s.unreadable ? "unreadable" : s.status),
      rec.size_name ? ` · ${rec.size_name}` : "", rec.role ? ` · ${rec.role}` : "",
      s.step != null ? ` · step ${fmt(s.step)}` : "", s.tokens != null ? ` · ${fmt(s.tokens)} tokens` : "",
      " · ", link("provenance", d.id, "provenance"), d.has_report ? " · " : "",
      d.has_report ? link("data", d.id, "data report") : ""));
    if (s.unreadable) app.append(el("p", { class: "warn" }, "The run store could not be read right now; showing what is available."));
    const events = d.events.slice();
    const charts = {};   // key -> [chart, line index]
    let livePoints = 0;  // raw points appended since the page was drawn from downsampled data
    const grid = section("Charts", el("div", { class: "grid" })).lastChild;
    for (const panel of d.panels) {
      const lines = panel.keys.map((key) => {
        const series = d.series[key] || { steps: [], values: [] };
        return { label: key, xs: series.steps.slice(), ys: series.values.slice(),
                 lo: series.min ? series.min.slice() : null, hi: series.max ? series.max.slice() : null };
      });
      const chart = new LineChart(grid, { title: panel.title, lines, logy: panel.logy, events: () => events });
      chart.root.dataset.panel = panel.title;
      window.GLASSLAB_CHARTS[panel.title] = chart.plot;
      panel.keys.forEach((key, i) => { charts[key] = [chart, i]; });
    }
    if (!d.panels.length) grid.append(el("p", { class: "muted" }, "Nothing logged yet."));
    const heat = {};
    const heatKeys = Object.keys(d.vectors);
    if (heatKeys.length) {
      const box = section("MoE: expert load and router bias per layer (rows: experts, columns: steps)",
        el("div", { class: "grid" })).lastChild;
      for (const key of heatKeys) heat[key] = new Heatmap(box, key, d.vectors[key].steps, d.vectors[key].values);
    }
    const samplesBox = section("Samples", el("div", {})).lastChild;
    const samples = d.samples.slice();
    const drawSamples = () => {
      samplesBox.textContent = "";
      samplesBox.append(samples.length ? table(["step", "prompt", "text"],
        samples.slice().reverse().map((x) => [x.step, el("pre", {}, x.prompt), el("pre", {}, x.text)]))
        : el("p", { class: "muted" }, "No samples yet."));
    };
    drawSamples();
    const eventsBox = section("Event timeline", el("div", {})).lastChild;
    const drawEvents = () => { eventsBox.textContent = ""; eventsBox.append(eventsTable(events.slice().sort((a, b) => a.time - b.time), false)); };
    drawEvents();
    return {
      lab: null,
      delta(runId, delta) {
        let unknown = false;
        for (const [key, step, value] of delta.scalars) {
          const hit = charts[key];
          if (hit) hit[0].add(hit[1], step, value); else unknown = true;
        }
        livePoints += delta.scalars.length;
        // A page left open for hours: draw again from the rollups instead of growing without end.
        if (livePoints > 200000) { livePoints = 0; unknown = true; }
        for (const [key, step, values] of delta.vectors) {
          if (heat[key]) heat[key].add(step, values); else unknown = true;
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
        if (unknown) scheduleRefresh();  // a new metric appeared: lay the panels out again
      },
    };
  }

  // x for a run's point: step, tokens, or FLOPs = tokens × FLOPs per token (from run.json).
  function xOf(run, axis, step, tokens) {
    if (axis === "step") return step;
    if (tokens == null) return null;
    return axis === "tokens" ? tokens : run.flops_per_token ? tokens * run.flops_per_token : null;
  }

  function tokensAt(run, step) {
    const t = run.tokens;
    if (!t || !t.steps.length) return null;
    const xs = t.steps, ys = t.values;
    let j = xs.findIndex((s) => s >= step);
    if (j === -1) j = xs.length - 1;
    if (xs[j] === step) return ys[j];
    const a = Math.max(0, j - 1), b = Math.max(1, j);
    if (xs.length < 2) return xs[0] ? ys[0] * step / xs[0] : null;
    return ys[a] + (ys[b] - ys[a]) * (step - xs[a]) / (xs[b] - xs[a]);
  }

  function trackTokens(run, delta) {
    for (const [key, step, value] of delta.scalars) {
      if (key !== "train/tokens") continue;
      run.tokens = run.tokens || { steps: [], values: [] };
      window.GlasslabCharts.upsert({ xs: run.tokens.steps, ys: run.tokens.values }, step, value);
    }
  }

  function drawCompare(d) {
    app.append(el("h1", {}, d.title));
    const state = { key: d.key, axis: "step", logx: false, logy: true };
    const pick = (name, options, onChange) => {
      const select = el("select", { name });
      for (const o of options) select.append(el("option", { value: o }, o));
      select.value = state[name];
      select.addEventListener("change", () => { state[name] = select.value; onChange(); });
      return el("label", {}, `${name} `, select);
    };
    const check = (name) => {
      const box = el("input", { type: "checkbox", name });
      box.checked = state[name];
      box.addEventListener("change", () => { state[name] = box.checked; redraw(); });
      return el("label", {}, box, ` ${name}`);
    };
    app.append(el("div", { class: "controls" }, pick("key", d.keys, () => redraw()),
      pick("axis", ["step", "tokens", "flops"], () => redraw()), check("logx"), check("logy")));
    const box = el("div", {});
    app.append(box);
    let chart = null;
    const redraw = () => {
      box.textContent = "";
      const lines = d.runs.map((run) => {
        const s = run.series[state.key] || { steps: [], values: [] };
        const tokens = s.tokens || s.steps.map((step) => tokensAt(run, step));
        return { label: `${run.id}${run.size_name ? ` (${run.size_name})` : ""}`,
                 xs: s.steps.map((step, i) => xOf(run, state.axis, step, tokens[i])), ys: s.values.slice() };
      });
      chart = new LineChart(box, { title: state.key, lines, logx: state.logx, logy: state.logy,
                                   xlabel: state.axis, height: 420 });
      window.GLASSLAB_CHARTS.compare = chart.plot;
    };
    redraw();
    section("Runs", table(["run", "size", "FLOPs/token"], d.runs.map((r) => [link("run", r.id, r.id), r.size_name || "", r.flops_per_token])));
    return {
      delta(runId, delta) {
        const index = d.runs.findIndex((r) => r.id === runId);
        if (index < 0) return;
        const run = d.runs[index];
        trackTokens(run, delta);
        for (const [key, step, value] of delta.scalars) {
          if (!run.series[key]) continue;
          const s = run.series[key];
          window.GlasslabCharts.upsert({ xs: s.steps, ys: s.values }, step, value);
          if (s.tokens) s.tokens = s.steps.map((st) => tokensAt(run, st));
          if (key === state.key) chart.add(index, xOf(run, state.axis, step, tokensAt(run, step)), value);
        }
      },
    };
  }

  function drawLadder(d) {
    app.append(el("h1", {}, d.title));
    const fit = d.fit || {};
    const p = d.prediction;
    if (p) app.append(el("p", {}, `Pre-registered prediction of ${fit.target || "eval/macro/loss"}: `,
      el("b", {}, fmt(p.point)), ` [${fmt(p.lo)}, ${fmt(p.hi)}] (${Math.round((p.level || 0.9) * 100)}%) at ${fmt(p.flops)} FLOPs`,
      p.registered_at ? ` · registered ${p.registered_at}` : ""));
    const curve = (p && p.curve) || fit.curve || [];
    const hero = d.hero;
    const lines = [];
    if (curve.length) lines.push({ label: "predicted", bandLabel: "prediction band", color: "#ff7f0e", dash: [6, 4],
      xs: curve.map((c) => c.flops), ys: curve.map((c) => c.point), lo: curve.map((c) => c.lo), hi: curve.map((c) => c.hi) });
    const rungs = fit.rungs || [];
    if (rungs.length) lines.push({ label: "rungs (mean over seeds)", color: "#2ca02c", points: true,
      xs: rungs.map((r) => r.flops), ys: rungs.map((r) => r.loss_mean) });
    let heroIndex = -1;
    if (hero) {
      const s = hero.series["eval/macro/loss"] || { steps: [], values: [] };
      heroIndex = lines.length;
      lines.push({ label: `hero ${hero.id}`, color: "#1f77b4", width: 2,
        xs: s.steps.map((step, i) => xOf(hero, "flops", step, s.tokens ? s.tokens[i] : tokensAt(hero, step))), ys: s.values.slice() });
    }
    const grid = section("Fit and prediction (x: training FLOPs = tokens × FLOPs per token)", el("div", {})).lastChild;
    const chart = new LineChart(grid, { title: fit.target || "eval/macro/loss", lines, logx: true, logy: true,
                                        xlabel: "FLOPs", height: 420 });
    window.GLASSLAB_CHARTS.ladder = chart.plot;
    chart.root.dataset.bands = String(chart.bandCount);
    if (!hero) app.append(el("p", { class: "muted" }, "No hero run yet."));
    else app.append(el("p", {}, "Hero run: ", link("run", hero.id, hero.id)));
    const law = fit.law || {};
    section("Law", table(["form", "parameters", "standard errors"],
      [[law.form || "", JSON.stringify(law.params || {}), JSON.stringify(law.param_se || {})]]),
      el("p", { class: "muted" }, `L∞: ${JSON.stringify(fit.L_inf || {})}`));
    section("Rungs", table(["runs", "size", "active params", "tokens", "FLOPs", "losses", "mean", "std"],
      rungs.map((r) => [el("span", {}, ...(r.run_ids || []).flatMap((id) => [link("run", id, id), " "])),
        r.size_name || "", r.params_active, r.tokens, r.flops, (r.losses || []).map(fmt).join(", "), r.loss_mean, r.loss_std])));
    if (fit.backtest) section("Back-test", el("pre", {}, JSON.stringify(fit.backtest, null, 2)));
    return {
      lab: scheduleRefresh,
      delta(runId, delta) {
        if (!hero || runId !== hero.id) return;
        trackTokens(hero, delta);
        for (const [key, step, value] of delta.scalars) {
          if (key === "eval/macro/loss") chart.add(heroIndex, xOf(hero, "flops", step, tokensAt(hero, step)), value);
        }
      },
    };
  }

  function drawData(d) {
    app.append(el("h1", {}, d.title));
    const r = d.report;
    if (!r) { app.append(el("p", { class: "warn" }, "report.json is missing or being written.")); return { lab: scheduleRefresh }; }
    app.append(el("p", { class: "muted" }, `manifest ${r.manifest_hash || "–"} · python ${r.python_version || "–"}`));
    const funnel = r.funnel || [];
    const top = Math.max(1, ...funnel.map((f) => f.documents || 0));
    section("Funnel", table(["stage", "documents", "", "bytes", "tokens"], funnel.map((f) => {
      const bar = el("div", { class: "bar" });
      bar.style.width = `${Math.round(200 * (f.documents || 0) / top)}px`;
      return [f.stage, f.documents, bar, f.bytes, f.tokens ?? ""];
    })));
    section("Filters", table(["filter", "dropped"], Object.entries(r.filters || {}).map(([k, v]) => [k, v])));
    const domains = Object.entries(r.domains || {});
    section("Domains", table(["domain", "documents", "tokens", "bytes", "bytes/token", "eval docs", "eval tokens"],
      domains.map(([name, x]) => [name, x.documents, x.tokens, x.bytes, x.bytes_per_token, x.eval_documents, x.eval_tokens])));
    const mixture = r.mixture;
    if (mixture) section(`Mixture (token budget ${fmt(mixture.token_budget)})`, table(["start step", "weights", "tokens", "epochs"],
      (mixture.phases || []).map((ph) => [ph.start_step,
        Object.entries(ph.weights || {}).map(([k, v]) => `${k}=${fmt(v)}`).join(", "),
        Object.entries(ph.tokens || {}).map(([k, v]) => `${k}=${fmt(v)}`).join(", "),
        Object.entries(ph.epochs || {}).map(([k, v]) => `${k}=${fmt(v)}`).join(", ")])));
    section("Sources", table(["name", "domain", "kind", "path", "provenance", "licence"],
      (r.sources || []).map((s) => [s.name, s.domain, s.kind, s.path, s.provenance, s.licence])));
    const lengths = section("Document lengths by domain (tokens)", el("div", { class: "grid" })).lastChild;
    for (const [name, x] of domains) {
      const h = x.length_histogram || { edges: [], counts: [] };
      const most = Math.max(1, ...h.counts);
      lengths.append(el("div", { class: "panel" }, el("h3", {}, name), table(["length", "documents", ""],
        h.counts.map((count, i) => {
          const bar = el("div", { class: "bar" });
          bar.style.width = `${Math.round(160 * count / most)}px`;
          return [`${fmt(h.edges[i])}–${fmt(h.edges[i + 1])}`, count, bar];
        }))));
    }
    const samples = section("Samples by domain");
    for (const [name, x] of domains) {
      samples.append(el("h3", {}, name));
      for (const text of x.samples || []) samples.append(el("pre", {}, text));
    }
    if (r.errors) section("Input errors", el("pre", {}, JSON.stringify(r.errors, null, 2)));
    return { lab: scheduleRefresh };
  }

  function drawProvenance(d) {
    app.append(el("h1", {}, d.title));
    const r = d.record;
    app.append(el("p", {}, link("run", d.id, "back to the run")));
    if (!r) { app.append(el("p", { class: "warn" }, "run.json is missing or being written.")); return { lab: scheduleRefresh }; }
    const code = r.code || {};
    section("Run", table(["field", "value"], [["size", r.size_name || ""], ["role", r.role || ""],
      ["started", r.started || ""], ["host", r.host || ""], ["platform", r.platform || ""], ["python", r.python || ""],
      ["code commit", code.commit || "unknown"], ["uncommitted changes", code.dirty ? `yes (diff sha256 ${code.diff_sha256})` : "no"],
      ["data manifest", r.data_manifest_hash || r.manifest_hash || (r.data || {}).manifest_hash || "–"],
      ["FLOPs/token", r.flops_per_token ?? "–"]]));
    section("Config (secrets redacted)", el("pre", {}, JSON.stringify(r.config || {}, null, 2)));
    section("Packages", table(["package", "version"], Object.entries(r.packages || {})));
    if (r.prediction) section("Pre-registered prediction", el("pre", {}, JSON.stringify(r.prediction, null, 2)));
    if (d.step) section("Step (step.json)", el("pre", {}, JSON.stringify(d.step, null, 2)));
    return { lab: scheduleRefresh };
  }

  const DRAW = { overview: drawOverview, run: drawRun, compare: drawCompare, ladder: drawLadder,
                 data: drawData, provenance: drawProvenance };
  let handler = null;

  function draw(data, first) {
    app.textContent = "";
    document.title = `${data.title} · glasslab observatory`;
    const h = DRAW[data.page](data);
    if (first) { handler = h; follow(data, { delta: (id, x) => handler.delta && handler.delta(id, x), lab: () => handler.lab && handler.lab() }); }
    else handler = h;
    document.body.dataset.ready = "1";
  }

  nav();
  loadData().then((data) => draw(data, true)).catch((err) => {
    app.textContent = "";
    app.append(el("h1", {}, "Could not load this page"), el("pre", {}, String(err)));
  });
})();
