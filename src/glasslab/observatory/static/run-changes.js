/* The run page's "what changed" strip: the metrics whose latest value moved most against their own
 * last 50 logged values (z-score, changes.py), each a link that finds its chart, and the MoE layers
 * and experts at the extremes of load and router bias now, each a link to that layer. A live page
 * reads it again at most every REFRESH_MS while the run logs. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt } = G;
  const { unitOf } = window.GlasslabFormat;
  const REFRESH_MS = 15000;

  function signed(v, digits) { return `${v > 0 ? "+" : v < 0 ? "−" : ""}${Math.abs(v).toFixed(digits)}`; }

  // A link that works in place (finds the chart, keeping the workspace) and as a URL to share.
  function metricLink(ctx, key, text) {
    const params = ctx.workspace.params();
    params.set("q", `^${G.escapeRegex(key)}$`);
    const a = el("a", { href: `?${params}`, class: "change-link", "data-key": key }, text);
    a.addEventListener("click", (e) => {
      if (!ctx.actions.showMetric) return;
      e.preventDefault();
      ctx.actions.showMetric(key);
    });
    return a;
  }

  function layerLink(ctx, layer, text) {
    const params = ctx.workspace.params();
    params.set("layer", String(layer));
    const a = el("a", { href: `?${params}`, class: "change-link", "data-layer": String(layer) }, text);
    a.addEventListener("click", (e) => {
      if (!ctx.actions.showLayer) return;
      e.preventDefault();
      ctx.actions.showLayer(layer);
    });
    return a;
  }

  function moveText(m) {
    if (m.kind === "nonfinite") return "latest value is not finite";
    const was = `mean ${fmt(m.mean, unitOf(m.key))} of the ${m.n} before`;
    if (m.kind === "left_constant") return `${fmt(m.value, unitOf(m.key))}, left a constant ${fmt(m.mean, unitOf(m.key))}`;
    return `${signed(m.z, 1)}σ: ${fmt(m.value, unitOf(m.key))} vs ${was}`;
  }

  function strip(body, ctx, changes, experts) {
    body.textContent = "";
    const metrics = (changes && changes.metrics) || [];
    if (metrics.length) {
      const items = metrics.map((m) => el("li", { class: `change change-${m.kind}` },
        metricLink(ctx, m.key, m.key), " ", el("span", { class: "muted" }, `${moveText(m)} (step ${fmt(m.step, "count")})`)));
      body.append(el("p", { class: "small muted" },
        `Latest value against each metric's own last ${changes.window} logged values (z-score); `
        + `${changes.scored} metrics scored, the ${metrics.length} that moved most:`), el("ul", { class: "changes" }, ...items));
    } else {
      body.append(el("p", { class: "muted" }, "Not enough history yet to say what moved."));
    }
    const load = (experts && experts.load) || {}, bias = (experts && experts.bias) || {};
    const cell = (c, value) => [layerLink(ctx, c.layer, `layer ${c.layer}`), ` expert ${c.expert} ${value}`];
    const list = (label, cells, value) => (cells && cells.length
      ? el("li", {}, el("b", {}, `${label}: `), ...cells.flatMap((c, i) => [i ? ", " : "", ...cell(c, value(c))])) : null);
    const ratio = (c) => (c.ratio == null ? fmt(c.value) : `${fmt(c.ratio)}× the mean share`);
    const rows = [
      list("most loaded", load.most, ratio),
      list("least loaded", load.least, ratio),
      load.layers && load.layers.length ? el("li", {}, el("b", {}, "layers most out of balance (max / mean share): "),
        ...load.layers.flatMap((l, i) => [i ? ", " : "", layerLink(ctx, l.layer, `layer ${l.layer}`), ` ${fmt(l.imbalance)}`])) : null,
      list("highest router bias", bias.highest, (c) => signed(c.value, 4)),
      list("lowest router bias", bias.lowest, (c) => signed(c.value, 4)),
    ].filter(Boolean);
    if (rows.length) {
      const step = ((load.most || [])[0] || (bias.highest || [])[0] || {}).step;
      body.append(el("p", { class: "small muted" }, `Experts now${step != null ? ` (step ${fmt(step, "count")})` : ""}:`),
                  el("ul", { class: "experts-now" }, ...rows));
    }
  }

  G.runSections.add({
    id: "changes", title: "What changed", order: 10,
    draw(body, ctx) {
      const d = ctx.d;
      if (!d.keys.length && !d.vector_keys.length) return false;
      strip(body, ctx, d.changes, d.experts);
      if (G.STATIC) return null;
      let dirty = false, last = performance.now(), timer = null;
      const refresh = async () => {
        timer = null;
        if (!dirty) return;
        dirty = false;
        last = performance.now();
        try {
          const fresh = await G.loadData();
          strip(body, ctx, fresh.changes, fresh.experts);
        } catch (err) { /* keep the strip as it is */ }
      };
      return {
        delta(delta) {
          if (!delta.scalars.length && !delta.vectors.length) return;
          dirty = true;
          if (!timer) timer = setTimeout(refresh, Math.max(0, REFRESH_MS - (performance.now() - last)));
        },
      };
    },
  });
})();
