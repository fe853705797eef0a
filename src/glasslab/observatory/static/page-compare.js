/* The compare page: any scalar metrics (one chart each, hover synced) for runs picked by name, role
 * or ladder; x in steps, tokens or FLOPs; log axes; EMA smoothing with the raw line faint behind; a
 * search box that filters the charts and the lab's metric names (grouped by prefix; pick one to add
 * its chart). The view lives in the URL (?runs=…&key=…&key=…&x=…&logx=1&logy=1&smooth=0.6&q=…; one key=
 * per metric, so a name may hold a comma; older links' keys=a,b still read), so a link
 * reproduces it, on the live server and in the static site alike. Live: series come from
 * /api/page/compare for the view; static: from the runs' chunk files (series-source.js), loaded when
 * the view first needs them. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt, link, section, statusCell, app, tokensAt } = G;
  const { LineChart, PALETTE } = window.GlasslabCharts;
  const MAX_KEYS = 12;  // as compare_page.py: charts one view draws
  const { unitOf } = window.GlasslabFormat;
  const AXES = ["step", "tokens", "flops"];

  function readView(d) {
    const q = new URLSearchParams(window.location.search);
    const list = (name) => (q.get(name) || "").split(",").filter(Boolean);
    const known = new Set(d.runs.map((r) => r.id));
    const runs = list("runs").filter((r) => known.has(r));
    const keys = [...list("keys"), ...q.getAll("key").filter(Boolean)];
    const smooth = Math.min(0.99, Math.max(0, Number(q.get("smooth")) || 0));
    return {
      runs: runs.length ? runs : d.picked.slice(), keys: keys.length ? [...new Set(keys)] : d.keys.slice(),
      x: AXES.includes(q.get("x") || q.get("axis")) ? (q.get("x") || q.get("axis")) : "step",
      logx: q.get("logx") === "1", logy: q.get("logy") === "1", smooth, q: q.get("q") || "",
    };
  }

  // The view as [name, value] pairs (what URLSearchParams takes): a key= pair per metric.
  function viewQuery(view) {
    const q = [["runs", view.runs.join(",")], ...view.keys.map((k) => ["key", k]), ["x", view.x]];
    if (view.logx) q.push(["logx", "1"]);
    if (view.logy) q.push(["logy", "1"]);
    if (view.smooth) q.push(["smooth", String(view.smooth)]);
    if (view.q) q.push(["q", view.q]);
    return q;
  }

  // x of a run's point: step, tokens, or FLOPs = tokens × FLOPs per token (from run.json).
  function xOf(run, axis, step, tokens) {
    if (axis === "step") return step;
    if (tokens == null) return null;
    return axis === "tokens" ? tokens : run.flops_per_token ? tokens * run.flops_per_token : null;
  }

  function drawCompare(d) {
    app.append(el("h1", {}, d.title));
    const runsById = Object.fromEntries(d.runs.map((r) => [r.id, r]));
    const view = readView(d);
    const cache = {};  // run -> key -> series ({steps, values, tokens?})
    for (const [runId, bykey] of Object.entries(d.series || {})) cache[runId] = Object.assign({}, bykey);
    const charts = {};
    const colourOf = (runId) => PALETTE[d.runs.findIndex((r) => r.id === runId) % PALETTE.length];

    // --- controls: x axis, log scales, smoothing, and the link that reproduces the view
    const permalink = el("a", { id: "permalink", href: "#" }, "link to this view");
    const axisSelect = el("select", { name: "axis", "aria-label": "x axis" }, ...AXES.map((a) => el("option", { value: a }, a)));
    axisSelect.value = view.x;
    const check = (name) => {
      const box = el("input", { type: "checkbox", name });
      box.checked = view[name];
      box.addEventListener("change", () => { view[name] = box.checked; update(false); });
      return el("label", {}, box, ` ${name === "logx" ? "log x" : "log y"}`);
    };
    const slider = el("input", { type: "range", name: "smooth", min: "0", max: "0.99", step: "0.01", "aria-label": "smoothing" });
    slider.value = String(view.smooth);
    const sliderValue = el("span", { class: "num" }, view.smooth.toFixed(2));
    slider.addEventListener("input", () => {
      view.smooth = Number(slider.value);
      sliderValue.textContent = view.smooth.toFixed(2);
      update(false);
    });
    axisSelect.addEventListener("change", () => { view.x = axisSelect.value; update(false); });
    app.append(el("div", { class: "controls" }, el("label", {}, "x ", axisSelect), check("logx"), check("logy"),
      el("label", { title: "exponential moving average; the raw curve stays faint behind" }, "smoothing ", slider, " ", sliderValue),
      permalink));

    // --- metrics: chips for the chosen ones, a picker for any other
    const chips = el("span", { class: "chips" });
    const addMetric = el("select", { name: "add-metric", "aria-label": "add a metric" });
    const drawMetricPicker = () => {
      chips.textContent = "";
      view.keys.forEach((key) => {
        const remove = el("button", { type: "button", class: "chip-x", title: `remove ${key}` }, "×");
        remove.addEventListener("click", () => { view.keys = view.keys.filter((k) => k !== key); update(true); });
        chips.append(el("span", { class: "chip", "data-key": key }, key, remove));
      });
      addMetric.textContent = "";
      addMetric.append(el("option", { value: "" }, "add a metric…"));
      for (const [key, count] of Object.entries(d.metrics)) {
        if (!view.keys.includes(key)) addMetric.append(el("option", { value: key }, `${key} (${count} run${count === 1 ? "" : "s"})`));
      }
    };
    addMetric.addEventListener("change", () => {
      if (addMetric.value) { view.keys.push(addMetric.value); update(true); }
    });
    app.append(el("div", { class: "controls" }, el("b", {}, "metrics "), chips, addMetric));

    // --- search: filters the charts shown and the lab's metric names; a picked name adds its chart
    const addMatching = el("button", { type: "button", name: "add-matching" }, "add matching");
    const search = new G.MetricSearch({
      keys: Object.keys(d.metrics), query: view.q,
      placeholder: "search metrics: text or regex (filters the charts; pick a name below to add it)",
      describe: (m) => {
        const lab = Object.keys(d.metrics).filter((k) => m.test(k)).length;
        const charts = view.keys.filter((k) => m.test(k)).length;
        addMatching.disabled = m.kind === "all" || !lab;
        return m.kind === "all" ? `${Object.keys(d.metrics).length} metrics in the lab`
          : `${charts} of ${view.keys.length} charts · ${lab} metrics in the lab match`;
      },
      onQuery: (q) => { view.q = q; update(false); },
      onPickKey: (key) => { if (!view.keys.includes(key)) { view.keys.push(key); update(true); } },
    });
    addMatching.title = `add the charts of the metrics that match (at most ${MAX_KEYS} in a view)`;
    addMatching.addEventListener("click", () => {
      const more = Object.keys(d.metrics).filter((k) => search.match.test(k) && !view.keys.includes(k));
      view.keys = [...view.keys, ...more].slice(0, Math.max(MAX_KEYS, view.keys.length));
      update(true);
    });
    search.node.firstChild.append(addMatching);
    app.append(search.node);

    const chartBox = el("div", { class: "grid compare-grid" });
    app.append(chartBox);

    // --- runs: a table of checkboxes that filters, with quick picks by role and ladder
    const pickerBox = section("Runs").appendChild(el("div", {}));
    const drawRunPicker = () => {
      pickerBox.textContent = "";
      const picked = new Set(view.runs);
      const quick = [["all", () => d.runs.map((r) => r.id)], ["none", () => []]];
      for (const role of [...new Set(d.runs.map((r) => r.role).filter(Boolean))]) {
        quick.push([`role: ${role}`, () => d.runs.filter((r) => r.role === role).map((r) => r.id)]);
      }
      for (const ladder of [...new Set(d.runs.map((r) => r.ladder).filter(Boolean))]) {
        quick.push([`ladder: ${ladder}`, () => d.runs.filter((r) => r.ladder === ladder).map((r) => r.id)]);
      }
      const buttons = quick.map(([label, ids]) => {
        const b = el("button", { type: "button", "data-pick": label }, label);
        b.addEventListener("click", () => { view.runs = ids(); update(true); });
        return b;
      });
      const columns = [
        { title: "", key: (r) => (picked.has(r.id) ? 0 : 1), text: () => "", cell: (r) => {
          const box = el("input", { type: "checkbox", name: "run", value: r.id, "aria-label": `show ${r.id}` });
          box.checked = picked.has(r.id);
          box.addEventListener("change", () => {
            view.runs = box.checked ? [...view.runs, r.id] : view.runs.filter((x) => x !== r.id);
            update(true);
          });
          return box;
        } },
        { title: "run", key: (r) => r.id, cell: (r) => {
          const swatch = el("span", { class: "swatch" });
          swatch.style.background = colourOf(r.id);
          return el("span", {}, swatch, link("run", r.id, r.id));
        } },
        { title: "role", key: (r) => r.role || "" },
        { title: "ladder", key: (r) => r.ladder || "" },
        { title: "size", key: (r) => r.size_name || "" },
        { title: "status", key: (r) => r.status || "", cell: (r) => statusCell(r.status) },
        { title: "FLOPs/token", key: (r) => r.flops_per_token, unit: "flops" },
      ];
      pickerBox.append(el("div", { class: "controls" }, el("b", {}, "pick "), ...buttons),
        G.sortableTable(columns, d.runs, { state: pickerState, class: "run-picker", placeholder: "filter runs: name, role, ladder…" }));
    };
    const pickerState = { sort: null, desc: false, filter: "" };

    const lineFor = (runId, key) => {
      const run = runsById[runId];
      const s = (cache[runId] || {})[key];
      if (!run || !s) return null;
      const tokens = s.tokens || s.steps.map((step) => tokensAt({ tokens: (cache[runId] || {})["train/tokens"] }, step));
      return { label: `${runId}${run.size_name ? ` (${run.size_name})` : ""}`, color: colourOf(runId),
               xs: s.steps.map((step, i) => xOf(run, view.x, step, tokens[i])), ys: s.values.slice() };
    };

    const drawCharts = () => {
      chartBox.textContent = "";
      for (const key of Object.keys(charts)) delete charts[key];
      for (const key of Object.keys(G.charts)) delete G.charts[key];
      if (!view.keys.length) chartBox.append(el("p", { class: "muted" }, "Add a metric to compare."));
      const match = G.matcher(view.q);
      for (const key of view.keys.filter((k) => match.test(k))) {
        const lines = view.runs.map((r) => lineFor(r, key)).filter(Boolean);
        const missing = view.runs.filter((r) => !(cache[r] || {})[key]).length;
        const chart = new LineChart(chartBox, { title: key, lines, logx: view.logx, logy: view.logy, unit: unitOf(key),
          xlabel: view.x, xunit: view.x === "flops" ? "flops" : "count", height: 320, smooth: view.smooth, sync: "compare",
          subtitle: missing ? `${missing} picked run(s) did not log ${key}` : null });
        chart.root.dataset.key = key;
        charts[key] = chart;
        G.charts[`compare:${key}`] = chart.plot;
        if (!G.charts.compare) G.charts.compare = chart.plot;
      }
    };

    let version = 0;
    async function ensureSeries() {
      const want = view.runs.flatMap((r) => view.keys.map((k) => [r, k])).filter(([r, k]) => !(cache[r] || {})[k]
        && (runsById[r].keys || []).includes(k));
      if (!want.length) return false;
      if (G.STATIC) {
        // The runs' chunk files (the run pages load the same), train/tokens with them for x in tokens.
        await Promise.all([...new Set(want.map(([r]) => r))].map(async (runId) => {
          G.source.useIndex(runId, (d.series_files || {})[runId]);
          const keys = [...new Set([...want.filter(([r]) => r === runId).map(([, k]) => k), "train/tokens"])];
          cache[runId] = Object.assign(cache[runId] || {}, await G.source.scalars(runId, keys));
        }));
        return false;
      }
      const fresh = await G.loadData(viewQuery(view));
      for (const [runId, bykey] of Object.entries(fresh.series || {})) cache[runId] = Object.assign(cache[runId] || {}, bykey);
      return fresh.cursors;
    }

    // Redraw for the view; ``refetch``: the runs or metrics changed (fetch their series, follow them).
    async function update(refetch) {
      const mine = ++version;
      history.replaceState && safeReplace(viewQuery(view));
      permalink.href = `?${new URLSearchParams(viewQuery(view))}`;
      if (refetch) { drawMetricPicker(); drawRunPicker(); search.changed(null); }
      if (refetch) {
        try {
          const cursors = await ensureSeries();
          if (cursors && G.following) G.following.restart(cursors);
        } catch (err) {
          chartBox.textContent = "";
          chartBox.append(el("p", { class: "warn" }, `Could not load series: ${err.message}`));
          return;
        }
      }
      if (mine === version) drawCharts();
      document.body.dataset.view = JSON.stringify(viewQuery(view));
    }

    function safeReplace(query) {
      try { history.replaceState(null, "", `?${new URLSearchParams(query)}`); } catch (err) { /* file:// may refuse */ }
    }

    drawMetricPicker();
    drawRunPicker();
    const ready = update(true);
    return {
      ready,
      query: () => viewQuery(view),
      delta(runId, delta) {
        const bykey = cache[runId];
        if (!bykey) return;
        const touched = new Set();
        for (const [key, step, value] of delta.scalars) {
          if (key === "train/tokens") {
            const t = bykey["train/tokens"] || (bykey["train/tokens"] = { steps: [], values: [] });
            window.GlasslabCharts.upsert({ xs: t.steps, ys: t.values }, step, value);
          }
          const s = bykey[key];
          if (!s || key === "train/tokens" && !view.keys.includes(key)) continue;
          const tokens = s.tokens;
          const before = s.steps.length;
          window.GlasslabCharts.upsert({ xs: s.steps, ys: s.values }, step, value);
          if (tokens) {
            const i = s.steps.indexOf(step);
            const t = tokensAt({ tokens: bykey["train/tokens"] }, step);
            if (s.steps.length > before) tokens.splice(i, 0, t); else tokens[i] = t;
          }
          touched.add(key);
        }
        for (const key of touched) {
          const chart = charts[key];
          if (!chart) continue;
          chart.lines = view.runs.map((r) => lineFor(r, key)).filter(Boolean);
          chart.redraw();
        }
      },
    };
  }

  window.GlasslabPages.compare = drawCompare;
})();
