/* glasslab observatory: one number formatter and one axis policy for every chart and table.
 *
 * A metric's unit follows from its name (DESIGN.md's metric names): bytes read as 1.2 GB, token
 * counts as 3.99M, rates as 13.6k/s, FLOPs as 8.7e12, MFU and accuracies as percent, everything
 * else with significant digits. Axis labels use the fewest digits that still show each tick's value
 * (so no two labels repeat) and never round a non-zero tick to 0 (log axes reach 1e-4 and below). */
(function () {
  "use strict";

  const SI = ["", "k", "M", "B", "T", "P"];
  const BYTES = ["B", "kB", "MB", "GB", "TB", "PB"];

  /* The unit of a metric or axis name: bytes, count, rate, flops, percent or plain. */
  function unitOf(key) {
    if (!key) return "plain";
    if (/bytes$/.test(key) || key.startsWith("memory/")) return "bytes";
    if (key === "throughput/mfu" || /\/acc(_norm)?$/.test(key) || key.startsWith("mixture/weight/")) return "percent";
    if (/per_second$/.test(key)) return "rate";
    if (/flops/i.test(key)) return "flops";
    if (key === "step" || key === "tokens" || /(^|\/|_)tokens$/.test(key)) return "count";
    return "plain";
  }

  // ``v`` to ``p`` significant digits: [text, the value the text stands for].
  function significant(v, p) {
    if (v === 0) return ["0", 0];
    const a = Math.abs(v);
    const rounded = Number(v.toPrecision(p));
    if (a >= 1e-3 && a < 1e6) return [String(rounded), rounded];
    const [mantissa, exponent] = rounded.toExponential(p - 1).split("e");
    return [`${String(Number(mantissa))}e${Number(exponent)}`, rounded];
  }

  // A scale step (1000s) and suffix table per unit, or null for units written plainly.
  function scaled(v, p, names, step) {
    const a = Math.abs(v);
    let k = 0;
    while (k < names.length - 1 && a >= step ** (k + 1) * (1 - 0.5 * 10 ** -p)) k++;
    const [text, value] = significant(v / step ** k, p);
    return [text, value * step ** k, names[k]];
  }

  /* [text, value shown] for ``v`` in ``unit`` at ``p`` significant digits. */
  function formatParts(v, unit, p) {
    if (unit === "bytes") {
      const [text, value, suffix] = scaled(v, p, BYTES, 1000);
      return [`${text} ${suffix}`, value];
    }
    if (unit === "count" || unit === "rate") {
      if (Math.abs(v) < 1000) {
        const [text, value] = significant(v, Number.isInteger(v) ? Math.max(p, 3) : p);
        return [unit === "rate" ? `${text}/s` : text, value];
      }
      const [text, value, suffix] = scaled(v, p, SI, 1000);
      return [`${text}${suffix}${unit === "rate" ? "/s" : ""}`, value];
    }
    if (unit === "percent") {
      const [text, value] = significant(100 * v, p);
      return [`${text}%`, value / 100];
    }
    if (unit === "flops" && Math.abs(v) >= 1e4) {
      const [mantissa, exponent] = v.toExponential(p - 1).split("e");
      const value = Number(`${mantissa}e${exponent}`);
      return [`${String(Number(mantissa))}e${Number(exponent)}`, value];
    }
    return significant(v, p);
  }

  /* A value for tables, legends and hover: 4 significant digits (integers in full below 10,000). */
  function fmt(v, unit) {
    if (v == null) return "–";
    if (typeof v !== "number") return String(v);
    if (!Number.isFinite(v)) return String(v);
    unit = unit || "plain";
    if (unit === "plain" && Number.isInteger(v) && Math.abs(v) < 1e4) return String(v);
    return formatParts(v, unit, 4)[0];
  }

  /* Labels for axis ticks (nulls stay blank): the fewest significant digits (at most 8) at which
   * every label is within 1% of the gap to its neighbours, so labels are distinct and honest. */
  function tickLabels(splits, unit) {
    const shown = splits.filter((v) => v != null && Number.isFinite(v));
    const sorted = shown.slice().sort((a, b) => a - b);
    let gap = Infinity;
    for (let i = 1; i < sorted.length; i++) if (sorted[i] > sorted[i - 1]) gap = Math.min(gap, sorted[i] - sorted[i - 1]);
    let digits = 8;
    for (let p = 1; p <= 8; p++) {
      const ok = shown.every((v) => {
        const [, value] = formatParts(v, unit, p);
        const tolerance = Number.isFinite(gap) ? 0.01 * gap : 1e-9 * Math.abs(v);
        return Math.abs(value - v) <= tolerance && (v === 0 || value !== 0);
      });
      if (ok) { digits = p; break; }
    }
    return splits.map((v) => (v == null || !Number.isFinite(v) ? "" : formatParts(v, unit, digits)[0]));
  }

  const AXIS_FONT = "12px system-ui, sans-serif";
  let measurer = null;
  function textWidth(text, font) {
    if (!measurer) measurer = document.createElement("canvas").getContext("2d");
    measurer.font = font || AXIS_FONT;
    return measurer.measureText(text).width;
  }

  /* Which log-axis ticks get a label: all of them, those led by 1, 2, 3, 5, 7, by 1, 2, 5 or by 1
   * alone, whichever the space between ticks allows. (uPlot's own rule measures the gap with a sign
   * that only works on y axes, so its log x axes label powers of ten alone.) */
  function logFilter(u, splits, axisIdx) {
    const axisOpts = u.axes[axisIdx];
    const key = axisOpts.scale;
    if (u.scales[key].distr !== 3) return splits;
    const space = axisOpts._space || 40;
    const gap = (a) => Math.abs(u.valToPos(a, key) - u.valToPos(10, key));
    const leads = gap(9) >= space ? null : gap(7) >= space ? [1, 2, 3, 5, 7] : gap(5) >= space ? [1, 2, 5] : [1];
    return splits.map((v) => {
      if (v == null || v <= 0 || leads == null) return v;
      const lead = Math.round(v / 10 ** Math.floor(Math.log10(v) + 1e-9));
      return leads.includes(lead) ? v : null;
    });
  }

  /* uPlot axis options under the policy: labels from ``tickLabels`` (kept on the plot as
   * ``u.glasslabLabels[axisIdx]`` for tests and screenshots), a y axis as wide as its widest label. */
  function axis(unit, opts) {
    opts = opts || {};
    const vertical = opts.side === 3 || opts.side === 1;
    return Object.assign({
      font: AXIS_FONT,
      filter: logFilter,
      values: (u, splits, axisIdx) => {
        const labels = tickLabels(splits, unit);
        (u.glasslabLabels || (u.glasslabLabels = {}))[axisIdx] = labels;
        return labels;
      },
      size: vertical ? (u, values) => {
        if (!values) return 50;
        const widest = Math.max(0, ...values.map((t) => (t ? textWidth(t) : 0)));
        return Math.ceil(widest) + 18 + (opts.label ? 22 : 0);
      } : (opts.label ? 52 : 34),
      gap: 5,
    }, opts);
  }

  window.GlasslabFormat = { unitOf, fmt, tickLabels, axis };
})();
