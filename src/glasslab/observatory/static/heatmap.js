/* glasslab observatory heatmaps: one vector per step (experts × steps, or layers × steps for a
 * per-layer family of metrics), with a row axis, a step axis and a colour bar. Signed values (router
 * biases) use a diverging map centred on 0; others a sequential one. Hover names the row and step;
 * ``highlight(step)`` (from a linked line chart) marks that step's column and names the rows that lead
 * there; with ``extremes``, the top and bottom rows are named (at the newest step until hovered). */
(function () {
  "use strict";
  const { el } = window.GlasslabCharts;
  const { fmt, tickLabels } = window.GlasslabFormat;

  // Colour stops as [t, r, g, b]: viridis (sequential) and blue–white–red (diverging, ColorBrewer RdBu).
  const SEQUENTIAL = [[0, 68, 1, 84], [0.25, 59, 82, 139], [0.5, 33, 145, 140], [0.75, 94, 201, 98], [1, 253, 231, 37]];
  const DIVERGING = [[0, 33, 102, 172], [0.25, 103, 169, 207], [0.5, 247, 247, 247], [0.75, 239, 138, 98], [1, 178, 24, 43]];

  function colour(stops, t) {
    t = Math.min(1, Math.max(0, t));
    let i = 1;
    while (i < stops.length - 1 && stops[i][0] < t) i++;
    const [t0, r0, g0, b0] = stops[i - 1], [t1, r1, g1, b1] = stops[i];
    const f = t1 === t0 ? 0 : (t - t0) / (t1 - t0);
    return [r0 + f * (r1 - r0), g0 + f * (g1 - g0), b0 + f * (b1 - b0)];
  }

  const MEASURE = document.createElement("canvas").getContext("2d");
  const MAX_ROW_LABEL_PX = 240;

  // The width a row label takes in ``node``'s font (laid out or not: a heatmap in a closed panel too).
  function textWidth(text, node) {
    MEASURE.font = getComputedStyle(node).font || "11px sans-serif";
    return MEASURE.measureText(text).width;
  }

  // About ``count`` round step values inside [lo, hi] (the x ticks).
  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / count;
    const mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(v);
    return out;
  }

  /* opts: {title, key, steps, values (one array of rows per step), signed?, rowName = "expert",
   *        rowLabels (a label per row; default its index), extremes (name top and bottom rows),
   *        log (colour by log10: a family of log-scaled metrics, e.g. gradient norms; values <= 0
   *        are gaps), bare (no panel box or title), onHover(step | null)} */
  class Heatmap {
    constructor(container, opts) {
      this.opts = opts;
      this.rowName = opts.rowName || "expert";
      this.rowLabels = opts.rowLabels || null;
      this.steps = opts.steps.slice();
      this.values = opts.values.slice();
      this.signed = opts.log ? false
        : opts.signed != null ? opts.signed : this.values.some((v) => v.some((x) => x != null && x < 0));
      this.canvas = el("canvas", { class: "heat-cells", width: 1, height: 1 });
      this.cursor = el("div", { class: "heat-cursor" });
      this.yaxis = el("div", { class: "heat-yaxis" });
      this.xaxis = el("div", { class: "heat-xaxis" });
      this.bar = el("canvas", { class: "heat-colorbar-scale", width: 1, height: 128 });
      this.barLabels = el("div", { class: "heat-colorbar-labels" });
      this.info = el("div", { class: "heat-info muted" }, `hover for each ${this.rowName}'s value`);
      const plot = el("div", { class: "heat-plot" }, this.canvas, this.cursor);
      this.grid = el("div", { class: "heat-grid" },
        el("div", { class: "heat-ytitle" }, this.rowName), this.yaxis, plot,
        el("div", { class: "heat-colorbar" }, this.bar, this.barLabels),
        this.xaxis, el("div", { class: "heat-xtitle" }, "step"));
      this.root = el("div", { class: opts.bare ? "heat" : "panel heat", "data-key": opts.key || null },
        opts.bare ? null : el("h3", {}, opts.title), this.grid, this.info);
      container.appendChild(this.root);
      this.canvas.addEventListener("mousemove", (e) => this.hover(e));
      this.canvas.addEventListener("mouseleave", () => {
        this.hovering = false;
        this.cursor.style.display = "none";
        if (opts.onHover) opts.onHover(null);
        this.nameExtremes();
      });
      this.draw();
      this.nameExtremes();
    }

    label(r) { return this.rowLabels ? this.rowLabels[r] : r; }

    // All columns at once (a per-layer family redrawn from its series).
    replace(steps, values) {
      this.steps = steps.slice(); this.values = values.slice();
      this.draw();
      if (!this.hovering) this.nameExtremes();
    }

    destroy() { this.root.remove(); }

    // With ``extremes``: the top and bottom rows at the newest step, until a hover says otherwise.
    nameExtremes() {
      if (this.opts.extremes && this.steps.length) this.highlight(this.steps[this.steps.length - 1], true);
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

    // A value where the colour scale puts it (its log10 on a log scale; null: a gap).
    scaled(x) { return x == null || !this.opts.log ? x : x > 0 ? Math.log10(x) : null; }

    range() {
      let lo = Infinity, hi = -Infinity;
      for (const v of this.values) {
        for (const raw of v) {
          const x = this.scaled(raw);
          if (x != null) { lo = Math.min(lo, x); hi = Math.max(hi, x); }
        }
      }
      if (!Number.isFinite(lo)) return [0, 1];
      if (this.signed) { const m = Math.max(Math.abs(lo), Math.abs(hi)) || 1; return [-m, m]; }
      return hi > lo ? [lo, hi] : [lo - 0.5, hi + 0.5];
    }

    draw() {
      const cols = this.values.length, rows = Math.max(0, ...this.values.map((v) => v.length));
      this.rows = rows;
      const ctx = this.canvas.getContext("2d");
      if (!cols || !rows) { ctx.clearRect(0, 0, this.canvas.width, this.canvas.height); return; }
      this.canvas.width = cols; this.canvas.height = rows;
      const [lo, hi] = this.range();
      this.span = [lo, hi];
      const stops = this.signed ? DIVERGING : SEQUENTIAL;
      const img = ctx.createImageData(cols, rows);
      for (let c = 0; c < cols; c++) {
        for (let r = 0; r < rows; r++) {
          const x = this.scaled(this.values[c][r]);
          const [red, green, blue] = colour(stops, x == null ? 0.5 : (x - lo) / (hi - lo));
          const p = 4 * (r * cols + c);
          img.data[p] = red; img.data[p + 1] = green; img.data[p + 2] = blue; img.data[p + 3] = x == null ? 40 : 255;
        }
      }
      ctx.putImageData(img, 0, 0);
      this.drawAxes(rows);
      this.drawColourBar(stops, lo, hi);
    }

    drawAxes(rows) {
      // Rows top to bottom, at most ~10 labels, the axis as wide as the widest (a cluster's name, not only an
      // expert's number; longer ones end in an ellipsis and say themselves on hover).
      this.yaxis.textContent = "";
      const every = Math.max(1, Math.ceil(rows / 10));
      let widest = 0;
      for (let r = 0; r < rows; r += every) {
        const text = String(this.label(r));
        const tick = el("div", { class: "heat-tick", title: text }, text);
        tick.style.top = `${100 * (r + 0.5) / rows}%`;
        this.yaxis.appendChild(tick);
        widest = Math.max(widest, textWidth(text, tick));
      }
      this.grid.style.setProperty("--heat-yaxis", `${Math.min(MAX_ROW_LABEL_PX, Math.ceil(widest) + 8)}px`);
      // Steps: each column's own when there are few, else round values on their column; one label a column.
      this.xaxis.textContent = "";
      const first = this.steps[0], last = this.steps[this.steps.length - 1];
      const ticks = this.steps.length <= 8 ? this.steps.slice() : niceTicks(first, last, 6);
      const labels = tickLabels(ticks, "count");
      const used = new Set();
      ticks.forEach((step, i) => {
        const c = this.column(step);
        if (used.has(c)) return;
        used.add(c);
        const tick = el("div", { class: "heat-tick" }, labels[i]);
        tick.style.left = `${100 * (c + 0.5) / this.steps.length}%`;
        this.xaxis.appendChild(tick);
      });
    }

    drawColourBar(stops, lo, hi) {
      const ctx = this.bar.getContext("2d");
      const img = ctx.createImageData(1, this.bar.height);
      for (let y = 0; y < this.bar.height; y++) {
        const [r, g, b] = colour(stops, 1 - y / (this.bar.height - 1));
        img.data.set([r, g, b, 255], 4 * y);
      }
      ctx.putImageData(img, 0, 0);
      this.barLabels.textContent = "";
      const marks = this.signed ? [hi, 0, lo] : [hi, (lo + hi) / 2, lo];
      const labels = tickLabels(this.opts.log ? marks.map((m) => 10 ** m) : marks, "plain");
      marks.forEach((v, i) => {
        const tick = el("div", { class: "heat-tick" }, labels[i]);
        tick.style.top = `${100 * i / (marks.length - 1)}%`;
        this.barLabels.appendChild(tick);
      });
    }

    // The column of the logged step nearest ``step``.
    column(step) {
      let best = 0;
      for (let i = 1; i < this.steps.length; i++) {
        if (Math.abs(this.steps[i] - step) < Math.abs(this.steps[best] - step)) best = i;
      }
      return best;
    }

    showColumn(c) {
      this.cursor.style.display = "block";
      this.cursor.style.left = `${100 * c / this.steps.length}%`;
      this.cursor.style.width = `${Math.max(100 / this.steps.length, 0.4)}%`;
    }

    hover(e) {
      const rect = this.canvas.getBoundingClientRect();
      const c = Math.floor((e.clientX - rect.left) / rect.width * this.steps.length);
      const r = Math.floor((e.clientY - rect.top) / rect.height * this.rows);
      const v = (this.values[c] || [])[r];
      if (v === undefined) return;
      this.showColumn(c);
      this.hovering = true;  // the linked line's cursor comes back here as highlight(): keep this text
      if (this.opts.onHover) this.opts.onHover(this.steps[c]);
      this.info.textContent = `step ${fmt(this.steps[c], "count")} · ${this.rowName} ${this.label(r)}: ${fmt(v)} ` +
        `(colour scale ${this.opts.log ? `${fmt(10 ** this.span[0])} … ${fmt(10 ** this.span[1])}, log`
          : `${fmt(this.span[0])} … ${fmt(this.span[1])}`})`;
    }

    /* Mark ``step``'s column (null: clear; ``quiet``: name without marking) and say which rows lead
     * there: with ``extremes`` the top and bottom two, else the largest |value| for signed vectors
     * and the most loaded otherwise. */
    highlight(step, quiet) {
      if (this.hovering) return;
      if (step == null || !this.steps.length) { this.cursor.style.display = "none"; this.nameExtremes(); return; }
      const c = this.column(step);
      if (!quiet) this.showColumn(c);
      const cells = (this.values[c] || []).map((v, r) => [r, v]).filter(([, v]) => v != null);
      const name = ([r, v]) => `${this.rowName} ${this.label(r)} ${this.signed && v > 0 ? "+" : ""}${fmt(v)}`;
      const at = `step ${fmt(this.steps[c], "count")}`;
      if (this.opts.extremes) {
        const ranked = cells.sort((a, b) => b[1] - a[1]);
        const top = ranked.slice(0, 2), bottom = ranked.slice(Math.max(2, ranked.length - 2)).reverse();
        this.info.textContent = `${at}: top ${top.map(name).join(", ")}` + (bottom.length ? ` · bottom ${bottom.map(name).join(", ")}` : "");
        return;
      }
      const ranked = cells.sort((a, b) => (this.signed ? Math.abs(b[1]) - Math.abs(a[1]) : b[1] - a[1])).slice(0, 3);
      this.info.textContent = `${at}: ${this.signed ? "largest |value|" : "most loaded"}: ${ranked.map(name).join(", ")}`;
    }
  }

  window.GlasslabCharts.Heatmap = Heatmap;
})();
