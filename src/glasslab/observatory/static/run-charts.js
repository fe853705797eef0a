/* The run page's charts, at a real run's width (hundreds of metrics, dozens of layers).
 *
 * - A search box (metric-search.js) filters the charts as you type: a chart whose title matches shows
 *   all its metrics, any other shows those that match. Pinned charts stay.
 * - A chart showing more than GROUP_LINES_MAX metrics draws as small multiples, or, for a per-layer
 *   family (panels.py), as one layer × step heatmap naming the top and bottom layers; its "lines"
 *   button draws it as one chart of lines again, whose legend names the line under the cursor and the
 *   extremes, never every line.
 * - Pin, reorder (pinned charts come first, in your order) and smooth each chart; the workspace
 *   (workspace.js) keeps all of it in the URL and per lab in the browser.
 * - Series are asked for as charts come near the viewport (series-source.js), so a run of 500
 *   metrics × 100,000 steps sends the charts in view, not 40 MB; a run of at most EAGER_KEYS metrics
 *   draws every chart at once.
 * ``GLASSLAB_TIMING`` (common.js) records when the first chart was drawn and how long the last search
 * took to draw its charts. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt } = G;
  const { LineChart, Heatmap, ema } = window.GlasslabCharts;
  const { unitOf } = window.GlasslabFormat;
  const GROUP_LINES_MAX = 8;
  const EAGER_KEYS = 100;
  const MARGIN = 600;  // px beyond the viewport within which charts are drawn ahead of a scroll
  const FRAME_BUDGET_MS = 12;  // charts are built a frame's worth at a time, so the first paints at once
  const SMOOTHING = [0, 0.6, 0.8, 0.9, 0.95, 0.99];
  const timing = G.timing;

  function button(text, title, onClick, attrs) {
    const b = el("button", Object.assign({ type: "button", class: "tool", title }, attrs || {}), text);
    b.addEventListener("click", onClick);
    return b;
  }

  function smoothingSelect(value, title, onChange) {
    const select = el("select", { class: "tool", title, "aria-label": title },
      ...SMOOTHING.map((v) => el("option", { value: String(v) }, v ? `smooth ${v}` : "raw")));
    if (!SMOOTHING.includes(value)) select.append(el("option", { value: String(value) }, `smooth ${value}`));
    select.value = String(value);
    select.addEventListener("change", () => onChange(Number(select.value)));
    return select;
  }

  // Columns of a per-layer family: the union of its rows' steps, each row's value at each (null where
  // a row has none), every row smoothed first when asked.
  function familyColumns(rows, smooth) {
    const steps = [...new Set(rows.flatMap((s) => (s ? s.steps : [])))].sort((a, b) => a - b);
    const at = new Map(steps.map((step, c) => [step, c]));
    const values = steps.map(() => new Array(rows.length).fill(null));
    rows.forEach((s, r) => {
      if (!s) return;
      const ys = smooth ? ema(s.values, smooth) : s.values;
      s.steps.forEach((step, i) => { values[at.get(step)][r] = ys[i]; });
    });
    return { steps, values };
  }

  /* A chart drawn when it comes near the viewport: lines of some metrics, one small multiple, or a
   * family's heatmap. ``node`` holds its place (a fixed height) until then. */
  class Unit {
    constructor(view, kind, spec, keys, smooth) {
      Object.assign(this, { view, kind, spec, keys, smooth, built: false, dead: false, chart: null });
      this.settled = new Promise((resolve) => { this.settle = resolve; });  // drawn, or gone
      this.points = kind === "lines" ? null : G.source.OVERVIEW;  // a heatmap row or a small multiple needs fewer
      this.node = el("div", { class: `slot slot-${kind}` });
    }

    has(points) { return this.keys.every((k) => G.source.has(this.view.d.id, "scalars", k, points)); }

    // The other resolution: a chart of lines may draw from the overview a heatmap or a small multiple
    // of the same metrics read before (the full series then replace it: ``refine``); a heatmap row or
    // a small multiple may draw from full series.
    fallback() { return this.points == null ? G.source.OVERVIEW : null; }

    drawable() { return this.has(this.points) || this.has(this.fallback()); }

    build() {
      if (this.built || this.dead) return;
      this.built = true;
      this.node.classList.add("drawn");
      const v = this.view, d = v.d;
      const exact = this.has(this.points);
      const points = exact ? this.points : this.fallback();
      this.coarse = !exact && this.points == null;
      const series = this.keys.map((k) => G.source.kept(d.id, "scalars", k, points));
      if (this.kind === "heat") {
        const rows = this.spec.family.rows.filter((_, i) => this.keys.includes(this.spec.keys[i]))
          .map((r) => (this.spec.family.row === "cluster" && (d.cluster_rows || {})[r]) || r);
        const { steps, values } = familyColumns(series, this.smooth);
        this.chart = new Heatmap(this.node, { title: this.spec.title, key: this.spec.id, steps, values, bare: true,
          rowName: this.spec.family.row || "layer", rowLabels: rows, extremes: true, log: this.spec.logy, onHover: (step) => v.hoverLines(step) });
        G.heatmaps[this.spec.id] = this.chart;
      } else {
        const lines = this.keys.map((k, i) => {
          const s = series[i] || { steps: [], values: [] };
          return { label: k, xs: s.steps, ys: s.values, lo: s.min || null, hi: s.max || null };
        });
        const band = d.band;
        if (band && band.curve.length && this.keys.includes(band.target)) {
          lines.push({ label: "pre-registered prediction", bandLabel: "prediction band", color: "#ff7f0e", dash: [6, 4],
            xs: band.curve.map((c) => c.step), ys: band.curve.map((c) => c.point),
            lo: band.curve.map((c) => c.lo), hi: band.curve.map((c) => c.hi) });
        }
        const levels = {};  // one dashed line per chance level, naming the tasks at it
        for (const k of this.keys.filter((key) => d.chance[key] != null)) (levels[d.chance[k]] ||= []).push(k.split("/")[2] || k);
        const hlines = Object.entries(levels).map(([y, tasks]) => ({ y: Number(y),
          label: `chance ${fmt(Number(y), "percent")} (${tasks.join(", ")})` }));
        const mini = this.kind === "mini";
        this.chart = new LineChart(this.node, { title: this.spec.title, lines, logy: this.spec.logy, bare: true,
          unit: unitOf(this.keys[0]), events: () => v.ctx.events, sync: v.ctx.sync, hlines, smooth: this.smooth,
          height: mini ? 150 : 240, legend: mini || this.keys.length > GROUP_LINES_MAX ? "compact" : "full",
          onCursor: (x) => v.cursorAt(x) });
        G.charts[mini ? this.keys[0] : this.spec.id] = this.chart.plot;
      }
      for (const key of this.keys) {
        if (!v.unitsByKey.has(key)) v.unitsByKey.set(key, new Set());
        v.unitsByKey.get(key).add(this);
      }
      if (timing.firstChart == null) requestAnimationFrame(() => { if (timing.firstChart == null) timing.firstChart = performance.now(); });
      this.settle();
    }

    // New live points are in the kept series (lines draw from them): redraw, a heatmap at most once a second.
    changed() {
      if (!this.built || this.dead) return;
      if (this.kind !== "heat") { this.chart.redraw(); return; }
      if (this.pending) return;
      this.pending = setTimeout(() => {
        this.pending = null;
        if (this.dead) return;
        const kept = this.keys.map((k) => G.source.kept(this.view.d.id, "scalars", k, this.points));
        const { steps, values } = familyColumns(kept, this.smooth);
        this.chart.replace(steps, values);
      }, 1000);
    }

    // The full series arrived for a chart drawn from the overview: draw it again from them.
    refine() {
      if (!this.built || this.dead || !this.coarse || !this.has(this.points)) return;
      this.teardown();
      this.node.textContent = "";
      this.built = false;
      this.build();
    }

    destroy() {
      this.dead = true;
      this.view.io.unobserve(this.node);
      this.view.units.delete(this);
      this.teardown();
      this.settle();
    }

    teardown() {
      if (!this.built) return;
      for (const key of this.keys) { const set = this.view.unitsByKey.get(key); if (set) set.delete(this); }
      if (this.kind === "heat") { if (G.heatmaps[this.spec.id] === this.chart) delete G.heatmaps[this.spec.id]; }
      else {
        const id = this.kind === "mini" ? this.keys[0] : this.spec.id;
        if (G.charts[id] === this.chart.plot) delete G.charts[id];
        this.chart.plot.destroy();
      }
    }
  }

  /* One chart of the page: a header (title, pin, reorder when pinned, lines toggle, smoothing) and a
   * body of units, laid out again when the metrics it shows change. */
  class Card {
    constructor(view, spec, pinned) {
      Object.assign(this, { view, spec, pinned, shown: null, units: [] });
      this.body = el("div", { class: "card-body" });
      this.tools = el("span", { class: "tools" });
      this.title = el("h3", {}, spec.title);
      this.root = el("div", { class: "panel card", "data-panel": spec.id }, el("div", { class: "card-head" }, this.title, this.tools),
                     this.body);
    }

    mode(keys) {
      if (this.view.ws.state.lines.includes(this.spec.id)) return "lines";
      if (this.spec.family && this.spec.family.row === "cluster") return "heat";  // cluster × step, however few
      if (keys.length <= GROUP_LINES_MAX) return "lines";
      return this.spec.family ? "heat" : "multiples";
    }

    // Show ``keys`` of this chart (none: hide it); the units are made again only when they change.
    apply(keys) {
      this.root.style.display = keys.length ? "" : "none";
      if (!keys.length) return;
      const mode = this.mode(keys);
      const signature = `${mode}\n${keys.join("\n")}`;
      if (signature === this.shown) return;
      this.shown = signature;
      this.clear();
      this.root.classList.toggle("wide", mode !== "lines");
      this.drawTools(keys, mode);
      const ws = this.view.ws;
      if (mode === "multiples") {
        const grid = el("div", { class: "multiples" });
        for (const key of keys) {
          const smooth = ws.state.smooth.charts[key] ?? ws.smoothing(this.spec.id);
          const unit = new Unit(this.view, "mini", this.spec, [key], smooth);
          const pin = button("pin", `pin ${key} to the top`, () => this.view.pin(key), { "data-pin": key });
          grid.append(el("div", { class: "mini", "data-key": key }, el("div", { class: "mini-head small" }, key, " ", pin), unit.node));
          this.units.push(unit);
        }
        this.body.append(el("div", { class: "muted small" }, `${keys.length} metrics, one small chart each`), grid);
      } else {
        const unit = new Unit(this.view, mode, this.spec, keys, ws.smoothing(this.spec.id));
        this.body.append(unit.node);
        this.units.push(unit);
      }
      for (const unit of this.units) this.view.watch(unit);
    }

    drawTools(keys, mode) {
      this.tools.textContent = "";
      const view = this.view, id = this.spec.id;
      if (this.pinned) {
        this.tools.append(button("↑", "move up", () => view.movePin(id, -1)), button("↓", "move down", () => view.movePin(id, 1)),
                          button("unpin", "unpin this chart", () => view.unpin(id), { "data-unpin": id }));
      } else {
        this.tools.append(button("pin", "pin this chart to the top", () => view.pin(id), { "data-pin": id }));
      }
      if (keys.length > GROUP_LINES_MAX) {
        const grouped = this.spec.family ? "heatmap" : "small multiples";
        this.tools.append(mode === "lines"
          ? button(grouped, `draw as ${grouped}`, () => view.toggleLines(id), { "data-toggle": "grouped" })
          : button("lines", "draw as one chart of lines", () => view.toggleLines(id), { "data-toggle": "lines" }));
      }
      this.tools.append(smoothingSelect(view.ws.smoothing(id), `smoothing of ${this.spec.title}`, (v) => view.smoothChart(id, v)));
    }

    clear() {
      for (const unit of this.units) unit.destroy();
      this.units = [];
      this.body.textContent = "";
    }

    destroy() { this.clear(); this.root.remove(); }
  }

  class ChartsView {
    constructor(body, ctx) {
      this.ctx = ctx;
      this.d = ctx.d;
      this.ws = ctx.workspace;
      this.known = new Set(this.d.keys);
      this.specs = new Map(this.d.charts.map((c) => [c.id, c]));
      this.units = new Set();
      this.unitsByKey = new Map();
      this.cards = [];
      this.wanted = new Set();
      this.queue = [];  // charts to build, in the order their series came
      this.version = 0;
      G.heatmaps = window.GLASSLAB_HEATMAPS = {};
      this.io = new IntersectionObserver((entries) => {
        for (const e of entries) if (e.isIntersecting && e.target.unit) this.wanted.add(e.target.unit);
        if (this.wanted.size) { const units = [...this.wanted]; this.wanted.clear(); this.load(units); }
      }, { rootMargin: `${MARGIN}px 0px` });
      this.search = new G.MetricSearch({ keys: this.d.keys, query: this.ws.state.q,
        describe: (m) => this.describe(m), onQuery: (q, event) => this.filter(q, event) });
      const pageSmooth = smoothingSelect(this.ws.state.smooth.page, "smoothing of every chart without its own", (v) => {
        this.ws.state.smooth.page = v; this.ws.save(); this.relayout();
      });
      pageSmooth.name = "smooth";
      this.search.node.firstChild.append(pageSmooth);
      this.pinned = el("div", { class: "grid pinned" });
      this.grid = el("div", { class: "grid charts" });
      body.append(this.search.node, this.pinned, this.grid);
      this.layout();
    }

    // The chart for a pinned id: one of the page's charts, or one metric of it.
    specFor(id) {
      if (this.specs.has(id)) return this.specs.get(id);
      if (!this.known.has(id)) return null;  // pinned in another run of the lab
      const owner = this.d.charts.find((c) => c.keys.includes(id));
      return { id, title: id, keys: [id], logy: owner ? owner.logy : false, family: null };
    }

    // The cards again (after a pin, a toggle, a smoothing): made first, then swapped in, so the page
    // never shrinks meanwhile and the reader stays where they were.
    layout() {
      const old = this.cards;
      const pins = this.ws.state.pins;
      const pinned = pins.map((id) => this.specFor(id)).filter(Boolean).map((spec) => new Card(this, spec, true));
      const rest = this.d.charts.filter((spec) => !pins.includes(spec.id)).map((spec) => new Card(this, spec, false));
      this.cards = [...pinned, ...rest];
      this.pinned.replaceChildren(...pinned.map((c) => c.root));
      this.pinned.style.display = pinned.length ? "" : "none";
      this.grid.replaceChildren(...(this.d.charts.length ? rest.map((c) => c.root)
        : [el("p", { class: "muted" }, "Nothing logged yet.")]));
      for (const card of old) card.destroy();
      this.applyFilter();
    }

    // Pinned keys leave their group; a chart's shown keys are all of them when its title matches.
    shownKeys(card, match) {
      if (card.pinned) return card.spec.keys;
      const keys = card.spec.keys.filter((k) => !this.ws.state.pins.includes(k));
      if (match.kind === "all" || match.test(card.spec.title)) return keys;
      return keys.filter((k) => match.test(k));
    }

    applyFilter() {
      const match = this.search.match;
      this.counts = { keys: 0, charts: 0 };
      for (const card of this.cards) {
        const keys = this.shownKeys(card, match);
        card.apply(keys);
        if (keys.length && !card.pinned) { this.counts.keys += keys.length; this.counts.charts += 1; }
      }
      this.search.status.textContent = this.describe(match);
    }

    describe(match) {
      if (!this.counts) return "";
      const what = match.kind === "all" ? "" : ` · ${match.kind === "regex" ? "regular expression" : "text"}`;
      return `${this.counts.keys} of ${this.known.size} metrics in ${this.counts.charts} charts${what}`;
    }

    // A keypress in the search box: filter, draw what is in view, then say how long it took.
    filter(query, event) {
      const started = event ? event.timeStamp : performance.now();
      this.ws.state.q = query;
      this.ws.save();
      this.applyFilter();
      const mine = ++this.version;
      // The charts in view now; those just outside follow as the observer reports them.
      this.drawVisible(0).then(() => requestAnimationFrame(() => {
        if (mine !== this.version) return;
        timing.filter = { query, ms: performance.now() - started };
        document.body.dataset.filtered = query;
      }));
    }

    // Search for ``query`` and bring the charts into view (a link of the "what changed" strip).
    find(query) {
      this.search.set(query);
      this.filter(query, null);
      (this.cards.find((c) => c.root.style.display !== "none" && !c.pinned) || { root: this.grid }).root.scrollIntoView();
    }

    watch(unit) {
      unit.node.unit = unit;
      this.units.add(unit);
      this.io.observe(unit.node);
    }

    // Build ``work`` (functions) a frame's budget at a time, first come first built.
    enqueue(work) {
      this.queue.push(...work);
      if (!this.pumping) this.pump();
    }

    pump() {
      this.pumping = true;
      const start = performance.now();
      while (this.queue.length && performance.now() - start < FRAME_BUDGET_MS) this.queue.shift()();
      if (this.queue.length) requestAnimationFrame(() => this.pump());
      else this.pumping = false;
    }

    // Draw ``units``: at once those whose series are kept (at some resolution), the others once
    // their series arrive (the first alone, so the top chart draws first; the rest by resolution).
    // Resolves when every one is drawn; charts drawn from an overview are refined after.
    load(units) {
      units = units.filter((u) => !u.built && !u.dead);
      this.enqueue(units.filter((u) => u.drawable()).map((u) => () => u.build()));
      const id = this.d.id;
      const draw = (list) => () => this.enqueue(list.map((u) => () => { u.build(); u.refine(); }));
      const jobs = [], refined = [];
      const waiting = units.filter((u) => !u.drawable());
      // The top chart's series alone first: the server reads them without the others in its way.
      const head = waiting.length ? G.source.scalars(id, waiting[0].keys, waiting[0].points).then(draw([waiting[0]]))
        : Promise.resolve();
      jobs.push(head);
      // Drawn now from an overview: the full series follow.
      const coarse = units.filter((u) => u.drawable() && u.points == null && !u.has(null));
      const rest = [...waiting.slice(1), ...coarse];
      for (const points of new Set(rest.map((u) => u.points))) {
        const some = rest.filter((u) => u.points === points);
        const job = head.then(() => G.source.scalars(id, some.flatMap((u) => u.keys), points)).then(draw(some));
        (some.some((u) => waiting.includes(u)) ? jobs : refined).push(job);
      }
      const failed = (err) => this.grid.prepend(el("p", { class: "warn" }, `Could not load series: ${err.message}`));
      Promise.all(refined).catch(failed);
      return Promise.all(jobs).then(() => Promise.all(units.map((u) => u.settled)), failed);
    }

    // Draw now every unit within ``margin`` px of the viewport; resolves once they are drawn. Cards
    // are looked at first: a card away from the view is not laid out inside (observatory.css).
    drawVisible(margin = MARGIN) {
      const top = -margin, bottom = window.innerHeight + margin;
      const near = (node) => { const r = node.getBoundingClientRect(); return r.height > 0 && r.bottom > top && r.top < bottom; };
      const units = this.cards.filter((c) => c.root.style.display !== "none" && near(c.root))
        .flatMap((c) => c.units.filter((u) => !u.built && !u.dead && near(u.node)));
      return this.load(units);
    }

    // Draw every chart (a run small enough to draw whole).
    drawAll() { return this.load([...this.units]); }

    relayout() { this.layout(); return this.drawVisible(); }

    /* Live, for a run too wide to draw at once: every metric's overview, a batch at a time in the
     * background once the view is drawn (~10 kB a metric), so a search draws whatever it finds at once
     * (a chart of lines from the overview, refined when its own series come). */
    async prefetch() {
      const keys = this.d.keys;
      for (let i = 0; i < keys.length; i += 96) {
        try { await G.source.scalars(this.d.id, keys.slice(i, i + 96), G.source.OVERVIEW); } catch (err) { return; }
      }
    }

    pin(id) {
      if (!this.ws.state.pins.includes(id)) this.ws.state.pins.push(id);
      this.ws.save();
      this.relayout();
    }

    unpin(id) {
      this.ws.state.pins = this.ws.state.pins.filter((p) => p !== id);
      this.ws.save();
      this.relayout();
    }

    movePin(id, by) {
      const pins = this.ws.state.pins, i = pins.indexOf(id), j = i + by;
      if (i < 0 || j < 0 || j >= pins.length) return;
      [pins[i], pins[j]] = [pins[j], pins[i]];
      this.ws.save();
      this.relayout();
    }

    toggleLines(id) {
      const lines = this.ws.state.lines;
      this.ws.state.lines = lines.includes(id) ? lines.filter((x) => x !== id) : [...lines, id];
      this.ws.save();
      this.relayout();
    }

    smoothChart(id, value) {
      if (value === this.ws.state.smooth.page) delete this.ws.state.smooth.charts[id];
      else this.ws.state.smooth.charts[id] = value;
      this.ws.save();
      this.relayout();
    }

    // A line chart's cursor moved: the heatmaps mark that step (once a frame, however many charts follow).
    cursorAt(x) {
      this.cursorX = x;
      if (this.cursorFrame) return;
      this.cursorFrame = requestAnimationFrame(() => {
        this.cursorFrame = null;
        for (const h of Object.values(G.heatmaps)) h.highlight(this.cursorX);
      });
    }

    // A heatmap's hover moves the line charts' cursors (one moves, the others follow it).
    hoverLines(step) {
      const unit = [...this.units].find((u) => u.built && u.kind !== "heat");
      if (unit) unit.chart.hoverAt(step);
    }

    delta(delta) {
      let unknown = false;
      const touched = new Set();
      for (const [key, step, value] of delta.scalars) {
        if (!this.known.has(key)) unknown = true;
        else if (G.source.addScalar(this.d.id, key, step, value)) touched.add(key);
      }
      for (const key of touched) for (const unit of this.unitsByKey.get(key) || []) unit.changed();
      if (delta.newEvents && delta.newEvents.length) {
        for (const unit of this.units) if (unit.built && unit.kind !== "heat") unit.chart.plot.redraw(false, true);
      }
      return unknown;
    }
  }

  G.runSections.add({
    id: "charts", title: "Charts", order: 20,
    draw(body, ctx) {
      const view = new ChartsView(body, ctx);
      ctx.actions.showMetric = (key) => view.find(`^${G.escapeRegex(key)}$`);
      const first = ctx.d.keys.length <= EAGER_KEYS ? view.drawAll() : view.drawVisible();
      first.then(ctx.chartsDrawn);
      if (!G.STATIC && ctx.d.keys.length > EAGER_KEYS) first.then(() => view.prefetch());
      // ``data-filtered`` names the search whose charts are drawn (the first view's too).
      first.then(() => { document.body.dataset.filtered = ctx.workspace.state.q; });
      return {
        ready: first,
        delta: (delta) => { if (view.delta(delta)) G.scheduleRefresh(); },
      };
    },
  });
})();
