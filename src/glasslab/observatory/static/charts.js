/* glasslab observatory line charts: uPlot with the axis policy of format.js, min/max bands,
 * prediction bands, error bars, horizontal reference lines (chance), EMA smoothing with the raw
 * line faint behind, hover synced across a page's charts, event markers, and a compact legend for
 * charts of many lines (the line under the cursor and the extremes, never every name).
 * Every text goes in through textContent or uPlot labels (set as text), never as HTML. */
(function () {
  "use strict";
  const { fmt, axis, unitOf } = window.GlasslabFormat;
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                   "#7f7f7f", "#bcbd22", "#17becf"];

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k === "class") node.className = v; else node.setAttribute(k, v === true ? "" : v);
    }
    for (const child of children) {
      if (child == null || child === false) continue;
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

  /* Exponential moving average with TensorBoard's debiasing (the first points are not pulled
   * towards 0); ``weight`` in [0, 1), gaps (null) are skipped and stay gaps. */
  function ema(ys, weight) {
    if (!weight) return ys.slice();
    const out = new Array(ys.length);
    let last = 0, n = 0;
    for (let i = 0; i < ys.length; i++) {
      const y = ys[i];
      if (y == null) { out[i] = null; continue; }
      last = last * weight + (1 - weight) * y;
      n += 1;
      out[i] = last / (1 - weight ** n);
    }
    return out;
  }

  /* lines: [{label, xs, ys, lo?, hi?, bandLabel?, err?: {lo, hi}, color?, points?, dash?, width?}]
   * opts: {title, unit, xunit, xlabel, logx, logy, height, smooth, sync, hlines: [{y, label}],
   *        events: () => [{id, step, kind, title, severity}], onCursor: (x | null) => void,
   *        legend: "full" (default) | "compact", bare: no panel box or title (the caller has one)} */
  class LineChart {
    constructor(container, opts) {
      this.opts = opts;
      this.lines = opts.lines;
      this.root = opts.bare ? el("div", {}) : el("div", { class: "panel" }, el("h3", {}, opts.title));
      if (opts.subtitle) this.root.appendChild(el("div", { class: "muted small" }, opts.subtitle));
      this.box = el("div", { class: "chart" });
      this.root.appendChild(this.box);
      if (opts.legend === "compact") {
        this.legend = el("div", { class: "legend-compact small" });
        this.root.appendChild(this.legend);
      }
      container.appendChild(this.root);
      this.pending = false;
      this.build();
    }

    destroy() {
      this.plot.destroy();
      this.root.remove();
    }

    // Per line: which columns it draws (main, smoothed, band hi/lo), in series order.
    layout(line) {
      if (this.opts.smooth && !line.points && !line.bandLabel) return ["raw", "smooth"];
      return line.lo ? ["main", "hi", "lo"] : ["main"];
    }

    data() {
      const tables = [];
      const keep = (v, log) => (v == null || (log && v <= 0) ? null : v);
      for (const line of this.lines) {
        const xs = [], ys = [], lo = [], hi = [];
        for (let i = 0; i < line.xs.length; i++) {
          const x = line.xs[i];
          if (x == null || (this.opts.logx && x <= 0) || (xs.length && x <= xs[xs.length - 1])) continue;
          xs.push(x);
          ys.push(keep(line.ys[i], this.opts.logy));
          if (line.lo) { lo.push(keep(line.lo[i], this.opts.logy)); hi.push(keep(line.hi[i], this.opts.logy)); }
        }
        const smooth = this.opts.smooth ? ema(ys, this.opts.smooth) : null;
        const columns = { main: ys, raw: ys, smooth, hi, lo };
        tables.push([xs, ...this.layout(line).map((c) => columns[c])]);
      }
      if (!tables.length) return [[]];
      return tables.length === 1 ? tables[0] : uPlot.join(tables);
    }

    build() {
      if (this.plot) this.plot.destroy();
      const o = this.opts;
      const unit = o.unit || "plain";
      const series = [{ label: o.xlabel || "step", value: (u, v) => fmt(v, o.xunit || unitOf(o.xlabel || "step")) }];
      const bands = [];
      const value = (u, v) => fmt(v, unit);
      this.shownSeries = [];  // per line: the uPlot series that shows its value (smoothed when smoothing)
      this.lines.forEach((line, i) => {
        const color = line.color || PALETTE[i % PALETTE.length];
        for (const column of this.layout(line)) {
          if (column === "main" || column === "smooth") this.shownSeries[i] = series.length;
          if (column === "main" || column === "raw") {
            const faint = column === "raw";
            series.push({
              label: faint ? `${line.label} (raw)` : line.label, value, spanGaps: true, dash: line.dash,
              stroke: line.points ? null : faint ? withAlpha(color, 0.22) : color,
              width: faint ? 1 : line.width || 1.5,
              points: line.points ? { show: true, size: 7, fill: color, stroke: color } : { show: false },
              paths: line.points ? () => null : undefined,
            });
          } else if (column === "smooth") {
            series.push({ label: line.label, value, spanGaps: true, stroke: color, width: line.width || 1.8,
                          points: { show: false } });
          } else {
            const edge = column === "hi" ? (line.bandLabel ? "hi" : "max") : (line.bandLabel ? "lo" : "min");
            series.push({ label: `${line.bandLabel || line.label} ${edge}`, value, spanGaps: true,
                          stroke: withAlpha(color, 0.35), width: line.bandLabel ? 1 : 0.5, points: { show: false } });
            if (column === "lo") {
              bands.push({ series: [series.length - 2, series.length - 1],
                           fill: withAlpha(color, line.bandLabel ? 0.22 : 0.12) });
            }
          }
        }
      });
      const width = Math.max(320, (this.box.clientWidth || 560) - 4);
      const plugins = [];
      if (o.events) plugins.push(markerPlugin(o.events));
      if (this.lines.some((l) => l.err)) plugins.push(errorBarPlugin(this));
      if (o.hlines && o.hlines.length) plugins.push(hlinePlugin(o.hlines));
      if (this.legend) plugins.push(compactLegendPlugin(this));
      const hooks = {};
      if (o.onCursor) {
        hooks.setCursor = [(u) => o.onCursor(u.cursor.idx == null ? null : u.data[0][u.cursor.idx])];
      }
      this.plot = new uPlot({
        width, height: o.height || 240, series, bands, plugins, hooks,
        // Room on the right for the last x label, which uPlot centres on the plot's edge.
        padding: [12, 28, 0, 4],
        scales: { x: { time: false, distr: o.logx ? 3 : 1 }, y: { distr: o.logy ? 3 : 1, range: yRange(o) } },
        axes: [axis(o.xunit || unitOf(o.xlabel || "step"), { label: o.xlabel || null, side: 2 }),
               axis(unit, { side: 3 })],
        cursor: o.sync ? { sync: { key: o.sync, setSeries: false } } : {},
        legend: { live: true, show: !this.legend },
      }, this.data(), this.box);
      this.plot.glasslab = this;
      this.bandCount = bands.length;
    }

    // Add a live point to line ``index`` and redraw at the next frame (many points, one redraw).
    add(index, x, y) {
      upsert(this.lines[index], x, y, y, y);
      this.redraw();
    }

    redraw() {
      if (this.pending) return;
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; this.plot.setData(this.data()); });
    }

    // Move the hover to ``x`` (from a linked heatmap); synced charts follow.
    hoverAt(x) {
      const u = this.plot;
      if (x == null) { u.setCursor({ left: -10, top: -10 }); return; }
      u.setCursor({ left: u.valToPos(x, "x"), top: u.bbox.height / devicePixelRatio / 2 });
    }
  }

  /* The y range: stretched to take in reference lines (a chance level); on a log axis, the data's own
   * span rather than whole decades (a loss from 3.9 to 7 gets ticks 4, 5, 6, 7, not 1 … 10). */
  function yRange(o) {
    const ys = (o.hlines || []).map((l) => l.y).filter((y) => y != null && (!o.logy || y > 0));
    if (!ys.length && !o.logy) return undefined;
    return (u, min, max) => {
      if (min == null || max == null) {
        if (!ys.length) return [o.logy ? 0.1 : 0, 1];
        min = Math.min(...ys); max = Math.max(...ys);
      }
      if (ys.length) { min = Math.min(min, ...ys); max = Math.max(max, ...ys); }
      if (!o.logy) return uPlot.rangeNum(min, max, 0.1, true);
      if (!(max > min)) { min /= 2; max *= 2; }
      // uPlot's log ticks step from the range's ends: snap them to a multiple of their decade.
      const snap = (v, up) => {
        const decade = 10 ** Math.floor(Math.log10(v));
        return (up ? Math.ceil(v / decade - 1e-9) : Math.floor(v / decade + 1e-9)) * decade;
      };
      return [snap(min, false), snap(max, true)];
    };
  }

  /* The compact legend: at the cursor, the line nearest the pointer and the highest and lowest lines
   * there; with no cursor, the highest and lowest at each line's last point. */
  function compactLegendPlugin(chart) {
    const unit = chart.opts.unit || "plain";
    const xunit = chart.opts.xunit || unitOf(chart.opts.xlabel || "step");
    const update = (u) => {
      const idx = u.cursor.idx;
      const at = [];
      chart.lines.forEach((line, i) => {
        const s = chart.shownSeries[i];
        if (s == null || line.bandLabel) return;
        const ys = u.data[s];
        let j = idx;
        if (j == null) { j = ys.length - 1; while (j >= 0 && ys[j] == null) j--; }
        if (j != null && j >= 0 && ys[j] != null) at.push({ label: line.label, y: ys[j], x: u.data[0][j] });
      });
      const parts = [];
      if (idx != null) parts.push(`${chart.opts.xlabel || "step"} ${fmt(u.data[0][idx], xunit)}`);
      if (at.length === 1) parts.push(`${at[0].label} ${fmt(at[0].y, unit)}`);
      else if (at.length) {
        if (idx != null && u.cursor.top >= 0) {
          const pointer = u.posToVal(u.cursor.top, "y");
          const near = at.reduce((a, b) => (Math.abs(b.y - pointer) < Math.abs(a.y - pointer) ? b : a));
          parts.push(`nearest: ${near.label} ${fmt(near.y, unit)}`);
        }
        const hi = at.reduce((a, b) => (b.y > a.y ? b : a)), lo = at.reduce((a, b) => (b.y < a.y ? b : a));
        parts.push(`highest: ${hi.label} ${fmt(hi.y, unit)}`, `lowest: ${lo.label} ${fmt(lo.y, unit)}`);
        if (idx == null) parts.push(`(last points; ${at.length} lines)`);
      }
      chart.legend.textContent = parts.join(" · ");
    };
    return { hooks: { setCursor: [update], setData: [update], ready: [update] } };
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

  // Whiskers from err.lo to err.hi at each x of lines that carry ``err`` (rung spread over seeds).
  function errorBarPlugin(chart) {
    return {
      hooks: {
        draw: [(u) => {
          const ctx = u.ctx;
          ctx.save();
          ctx.lineWidth = Math.max(1, devicePixelRatio);
          for (const [i, line] of chart.lines.entries()) {
            if (!line.err) continue;
            ctx.strokeStyle = line.color || PALETTE[i % PALETTE.length];
            for (let j = 0; j < line.xs.length; j++) {
              const lo = line.err.lo[j], hi = line.err.hi[j], x = line.xs[j];
              if (lo == null || hi == null || x == null || hi <= lo) continue;
              const px = u.valToPos(x, "x", true);
              const y0 = u.valToPos(lo, "y", true), y1 = u.valToPos(hi, "y", true);
              const cap = 5 * devicePixelRatio;
              ctx.beginPath();
              ctx.moveTo(px, y0); ctx.lineTo(px, y1);
              ctx.moveTo(px - cap, y0); ctx.lineTo(px + cap, y0);
              ctx.moveTo(px - cap, y1); ctx.lineTo(px + cap, y1);
              ctx.stroke();
            }
          }
          ctx.restore();
        }],
      },
    };
  }

  // Dashed horizontal reference lines (a task's chance level) with their label.
  function hlinePlugin(hlines) {
    return {
      hooks: {
        draw: [(u) => {
          const ctx = u.ctx;
          ctx.save();
          ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
          ctx.strokeStyle = "#6a737d";
          ctx.fillStyle = "#6a737d";
          ctx.lineWidth = devicePixelRatio;
          ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
          ctx.textAlign = "left";  // uPlot leaves the y axis's alignment behind
          ctx.textBaseline = "bottom";
          for (const line of hlines) {
            if (line.y == null || line.y < u.scales.y.min || line.y > u.scales.y.max) continue;
            const y = u.valToPos(line.y, "y", true);
            ctx.beginPath();
            ctx.moveTo(u.bbox.left, y); ctx.lineTo(u.bbox.left + u.bbox.width, y);
            ctx.stroke();
            if (line.label) ctx.fillText(line.label, u.bbox.left + 4 * devicePixelRatio, y - 3 * devicePixelRatio);
          }
          ctx.restore();
        }],
      },
    };
  }

  window.GlasslabCharts = { el, fmt, LineChart, upsert, ema, PALETTE };
})();
