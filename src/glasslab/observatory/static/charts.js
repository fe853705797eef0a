/* glasslab observatory charts: uPlot line charts with min/max bands and event markers, and heatmaps.
 * Every text goes in through textContent or uPlot labels (set as text), never as HTML. */
(function () {
  "use strict";
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                   "#7f7f7f", "#bcbd22", "#17becf"];

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null) continue;
      if (k === "class") node.className = v; else node.setAttribute(k, v);
    }
    for (const child of children) {
      if (child == null) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function withAlpha(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }

  // Insert or replace (x, y) keeping xs sorted: a re-logged step (a resume) replaces its value.
  function upsert(line, x, y, lo, hi) {
    const xs = line.xs;
    let i = xs.length;
    if (i && xs[i - 1] >= x) {
      let a = 0, b = xs.length;
      while (a < b) { const m = (a + b) >> 1; if (xs[m] < x) a = m + 1; else b = m; }
      i = a;
    }
    if (xs[i] === x) { line.ys[i] = y; if (line.lo) { line.lo[i] = lo; line.hi[i] = hi; } return; }
    xs.splice(i, 0, x); line.ys.splice(i, 0, y);
    if (line.lo) { line.lo.splice(i, 0, lo); line.hi.splice(i, 0, hi); }
  }

  /* lines: [{label, xs, ys, lo?, hi?, color?, points?, dash?}]; opts: {title, logx, logy, xlabel,
   * events: () => [{id, step, kind, title, severity}], bands: [[loLine, hiLine, color]]} */
  class LineChart {
    constructor(container, opts) {
      this.opts = opts;
      this.lines = opts.lines;
      this.root = el("div", { class: "panel" }, el("h3", {}, opts.title));
      this.box = el("div", { class: "chart" });
      this.root.appendChild(this.box);
      container.appendChild(this.root);
      this.pending = false;
      this.build();
    }

    data() {
      const tables = [];
      const keep = (v, log) => (v == null || (log && v <= 0) ? null : v);
      for (const line of this.lines) {
        const xs = [], cols = [[], [], []];
        for (let i = 0; i < line.xs.length; i++) {
          const x = line.xs[i];
          if (x == null || (this.opts.logx && x <= 0) || (xs.length && x <= xs[xs.length - 1])) continue;
          xs.push(x);
          cols[0].push(keep(line.ys[i], this.opts.logy));
          if (line.lo) { cols[1].push(keep(line.lo[i], this.opts.logy)); cols[2].push(keep(line.hi[i], this.opts.logy)); }
        }
        tables.push(line.lo ? [xs, cols[0], cols[2], cols[1]] : [xs, cols[0]]);
      }
      if (!tables.length) return [[]];
      return tables.length === 1 ? tables[0] : uPlot.join(tables);
    }

    build() {
      if (this.plot) this.plot.destroy();
      const series = [{ label: this.opts.xlabel || "step" }];
      const bands = [];
      this.lines.forEach((line, i) => {
        const color = line.color || PALETTE[i % PALETTE.length];
        series.push({
          label: line.label, stroke: line.points ? null : color, width: line.width || 1.5, spanGaps: true,
          dash: line.dash, points: line.points ? { show: true, size: 7, fill: color, stroke: color } : { show: false },
          paths: line.points ? () => null : undefined,
        });
        if (line.lo) {
          const hiIdx = series.length;
          series.push({ label: line.bandLabel ? line.bandLabel + " hi" : line.label + " max", stroke: withAlpha(color, .35),
                        width: line.bandLabel ? 1 : 0.5, spanGaps: true, points: { show: false } });
          series.push({ label: line.bandLabel ? line.bandLabel + " lo" : line.label + " min", stroke: withAlpha(color, .35),
                        width: line.bandLabel ? 1 : 0.5, spanGaps: true, points: { show: false } });
          bands.push({ series: [hiIdx, hiIdx + 1], fill: withAlpha(color, line.bandLabel ? .22 : .12) });
        }
      });
      const width = Math.max(320, (this.box.clientWidth || 560) - 4);
      const chart = this;
      const plugins = this.opts.events ? [markerPlugin(this.opts.events)] : [];
      this.plot = new uPlot({
        width, height: this.opts.height || 240, series, bands, plugins,
        scales: { x: { time: false, distr: this.opts.logx ? 3 : 1 }, y: { distr: this.opts.logy ? 3 : 1 } },
        axes: [{ label: this.opts.xlabel || null, size: 40 }, { size: 60 }],
        legend: { live: true },
      }, this.data(), this.box);
      this.plot.glasslab = chart;
      this.bandCount = bands.length;
    }

    // Add a live point to line ``index`` and redraw at the next frame (many points, one redraw).
    add(index, x, y) {
      const line = this.lines[index];
      upsert(line, x, y, y, y);
      this.redraw();
    }

    redraw() {
      if (this.pending) return;
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; this.plot.setData(this.data()); });
    }
  }

  // Vertical marks at event steps that link to the entry in the timeline (#event-<id>).
  function markerPlugin(getEvents) {
    return {
      hooks: {
        draw: [(u) => {
          let layer = u.over.querySelector(".markers");
          if (!layer) { layer = el("div", { class: "markers" }); u.over.appendChild(layer); }
          layer.textContent = "";
          const min = u.scales.x.min, max = u.scales.x.max;
          for (const ev of getEvents()) {
            if (ev.step == null || ev.step < min || ev.step > max) continue;
            const a = el("a", { class: `event-marker sev-${ev.severity}`, href: `#event-${ev.id}`,
                                title: `step ${ev.step} · ${ev.kind}: ${ev.title}` });
            a.style.left = `${u.valToPos(ev.step, "x")}px`;
            layer.appendChild(a);
          }
        }],
      },
    };
  }

  // Vectors over steps (experts × steps), colour by value; hover shows the numbers.
  class Heatmap {
    constructor(container, title, steps, values) {
      this.steps = steps.slice();
      this.values = values.slice();
      this.canvas = el("canvas", { width: 480, height: 160 });
      this.info = el("div", { class: "muted" }, "hover for values");
      this.root = el("div", { class: "panel heat" }, el("h3", {}, title), this.canvas, this.info);
      container.appendChild(this.root);
      this.canvas.addEventListener("mousemove", (e) => this.hover(e));
      this.draw();
    }

    add(step, vec) {
      if (this.steps.length && step <= this.steps[this.steps.length - 1]) {
        // A re-logged step (a resume) replaces its column; one thinned away stays out.
        const i = this.steps.indexOf(step);
        if (i >= 0) { this.values[i] = vec; this.draw(); }
        return;
      }
      this.steps.push(step); this.values.push(vec);
      this.draw();
    }

    draw() {
      const cols = this.values.length, rows = Math.max(0, ...this.values.map((v) => v.length));
      const ctx = this.canvas.getContext("2d");
      if (!cols || !rows) { ctx.clearRect(0, 0, this.canvas.width, this.canvas.height); return; }
      this.canvas.width = cols; this.canvas.height = rows;
      let lo = Infinity, hi = -Infinity;
      for (const v of this.values) for (const x of v) if (x != null) { lo = Math.min(lo, x); hi = Math.max(hi, x); }
      const img = ctx.createImageData(cols, rows);
      for (let c = 0; c < cols; c++) {
        for (let r = 0; r < rows; r++) {
          const x = this.values[c][r];
          const t = x == null || hi === lo ? 0.5 : (x - lo) / (hi - lo);
          const p = 4 * (r * cols + c);
          img.data[p] = 255 * t; img.data[p + 1] = 80 + 120 * (1 - Math.abs(t - 0.5) * 2);
          img.data[p + 2] = 255 * (1 - t); img.data[p + 3] = x == null ? 40 : 255;
        }
      }
      ctx.putImageData(img, 0, 0);
      this.range = [lo, hi];
    }

    hover(e) {
      const rect = this.canvas.getBoundingClientRect();
      const c = Math.floor((e.clientX - rect.left) / rect.width * this.canvas.width);
      const r = Math.floor((e.clientY - rect.top) / rect.height * this.canvas.height);
      const v = (this.values[c] || [])[r];
      if (v !== undefined) this.info.textContent = `step ${this.steps[c]} · row ${r}: ${fmt(v)} (range ${fmt(this.range[0])} … ${fmt(this.range[1])})`;
    }
  }

  function fmt(v) {
    if (v == null) return "–";
    if (typeof v !== "number") return String(v);
    const a = Math.abs(v);
    if (Number.isInteger(v) && a < 1e15) return v.toLocaleString("en-US");
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(3);
    return String(Math.round(v * 1e4) / 1e4);
  }

  window.GlasslabCharts = { el, fmt, LineChart, Heatmap, upsert, PALETTE };
})();
