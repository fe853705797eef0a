/* The run page's MoE layers, one at a time: the router-bias norm line and the expert-load and
 * router-bias heatmaps, linked by hover (the line's cursor marks the heatmaps' column and names the
 * experts that lead there; a heatmap's hover moves every chart's cursor to its step). The layer shown
 * is part of the workspace (``layer`` in the URL); its series and vectors load when it is shown. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el } = G;
  const { LineChart, Heatmap } = window.GlasslabCharts;
  const HEATMAPS = [["expert_load", "expert load (share of routed tokens)"], ["router_bias", "router bias (signed; 0 is white)"]];

  G.runSections.add({
    id: "moe", title: "MoE layers: expert load and router bias", order: 30,
    draw(body, ctx) {
      const d = ctx.d, ws = ctx.workspace;
      if (!d.layers.length) return false;
      const vectorKeys = new Set(d.vector_keys);
      const select = el("select", { name: "layer", "aria-label": "MoE layer" },
        ...d.layers.map((i) => el("option", { value: String(i) }, `layer ${i}`)));
      const layerBody = el("div", { class: "grid moe-layer" });
      body.append(el("div", { class: "controls" }, el("label", {}, "layer ", select),
        el("span", { class: "muted" }, "Hover a chart or a heatmap: the other follows, and the experts with the "
          + "largest values at that step are named.")), layerBody);
      let current = null;
      let shown = 0;

      async function show(layer) {
        const mine = ++shown;
        select.value = String(layer);
        const lineKey = `moe/layer_${layer}/router_bias_norm`;
        const heatKeys = HEATMAPS.map(([kind]) => `moe/layer_${layer}/${kind}`).filter((k) => vectorKeys.has(k));
        const [series, vectors] = await Promise.all([G.source.scalars(d.id, [lineKey]), G.source.vectors(d.id, heatKeys)]);
        if (mine !== shown) return;  // another layer was picked meanwhile
        if (current && current.line) current.line.plot.destroy();
        layerBody.textContent = "";
        const heat = {};
        const highlight = (step) => { for (const h of Object.values(heat)) h.highlight(step); };
        const s = series[lineKey];
        const line = s ? new LineChart(layerBody, {
          title: `Layer ${layer}: router bias norm`, sync: ctx.sync, events: () => ctx.events, onCursor: highlight, height: 200,
          lines: [{ label: lineKey, xs: s.steps, ys: s.values, lo: s.min || null, hi: s.max || null }],
        }) : null;
        if (line) G.charts["moe-layer"] = line.plot;
        for (const [kind, title] of HEATMAPS) {
          const key = `moe/layer_${layer}/${kind}`;
          const v = vectors[key];
          if (!v) continue;
          heat[key] = new Heatmap(layerBody, { title: `Layer ${layer}: ${title}`, key, steps: v.steps, values: v.values,
            signed: kind === "router_bias" ? true : null, onHover: (step) => line && line.hoverAt(step) });
        }
        current = { layer, line, lineKey, heat };
      }

      const pick = (layer) => {
        ws.state.layer = layer;
        ws.save();
        return show(layer);
      };
      select.addEventListener("change", () => pick(Number(select.value)));
      ctx.actions.showLayer = (layer) => {
        if (!d.layers.includes(layer)) return;
        pick(layer).then(() => body.parentNode.scrollIntoView());
      };
      const first = d.layers.includes(ws.state.layer) ? ws.state.layer : d.layers[0];
      return {
        ready: ctx.charts.then(() => show(first)),  // the first chart comes first
        delta(delta) {
          let unknown = false;
          for (const [key, step] of delta.scalars) {
            if (current && current.line && key === current.lineKey) current.line.redraw(step);  // kept series holds the point
          }
          for (const [key, step, values] of delta.vectors) {
            if (!vectorKeys.has(key)) { unknown = true; continue; }
            G.source.addVector(d.id, key, step, values);
            // The heatmap on show keeps its own copy of the columns.
            if (current && current.heat[key]) current.heat[key].add(step, values);
          }
          if (unknown) G.scheduleRefresh();
        },
      };
    },
  });
})();
