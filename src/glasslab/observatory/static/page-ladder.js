/* The ladder page: the verdict first (hero against its pre-registered band), then the fitted law drawn
 * through every rung's seeds with their spread, the band over the live hero curve, the law's
 * parameters rounded to their uncertainty, the rungs, the back-test and every registered prediction. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt, link, table, section, app, tokensAt, trackTokens, sourced, sourceNotes } = G;
  const { LineChart } = window.GlasslabCharts;
  const { verdictCell } = window.GlasslabOverview;

  // The law's compute: training FLOPs outside the LM head, per token for the hero (from its prediction).
  function xOfFlops(run, step, tokens) {
    return tokens == null || !run.law_flops_per_token ? null : tokens * run.law_flops_per_token;
  }

  function interval(p) { return `${fmt(p.point)} [${fmt(p.lo)}, ${fmt(p.hi)}]`; }

  function verdictLine(d) {
    const v = d.verdict, p = d.prediction;
    if (v) {
      return el("p", { id: "verdict", class: `verdict ${v.inside == null ? "pending" : v.inside ? "inside" : "outside"}` },
        el("b", {}, "Verdict: "), v.state === "pending" ? v.text
          : sourced(el("span", { id: "hero-loss" }, `hero ${v.text}`), d.sources.hero));
    }
    if (p) return el("p", { id: "verdict", class: "verdict pending" }, el("b", {}, "Verdict: "),
      `no hero run yet; predicted ${interval(p)} at ${fmt(p.flops, "flops")} FLOPs`);
    return el("p", { id: "verdict", class: "verdict pending" }, el("b", {}, "Verdict: "), "no prediction in this fit");
  }

  function chartLines(d) {
    const fit = d.fit || {};
    const p = d.prediction;
    const lines = [];
    if (d.law_line.length) {
      lines.push({ label: "fitted law L(C)", color: "#555555", width: 1.2,
        xs: d.law_line.map((q) => q.flops), ys: d.law_line.map((q) => q.loss) });
    }
    const curve = (p && p.curve) || fit.curve || [];
    if (curve.length) {
      lines.push({ label: "predicted", bandLabel: "prediction band", color: "#ff7f0e", dash: [6, 4],
        xs: curve.map((c) => c.flops), ys: curve.map((c) => c.point), lo: curve.map((c) => c.lo), hi: curve.map((c) => c.hi) });
    }
    const rungs = fit.rungs || [];
    const seeds = Math.max(0, ...rungs.map((r) => (r.losses || []).length));
    for (let j = 0; j < seeds; j++) {
      lines.push({ label: `rung seed ${j}`, color: "#2ca02c", points: true,
        xs: rungs.map((r) => r.flops), ys: rungs.map((r) => (r.losses || [])[j] ?? null) });
    }
    if (rungs.some((r) => (r.losses || []).length > 1)) {
      lines.push({ label: "rung mean ± std over seeds", color: "#145a14", points: true,
        xs: rungs.map((r) => r.flops), ys: rungs.map((r) => r.loss_mean),
        err: { lo: rungs.map((r) => r.loss_mean - (r.loss_std || 0)), hi: rungs.map((r) => r.loss_mean + (r.loss_std || 0)) } });
    }
    if (p && p.flops != null) {
      lines.push({ label: `predicted at the hero's compute (${Math.round(100 * (p.level || 0.9))}%)`, color: "#c85a00",
        points: true, xs: [p.flops], ys: [p.point], err: { lo: [p.lo], hi: [p.hi] } });
    }
    return lines;
  }

  function approach3Line(a3) {
    if (!a3 || !a3.fitted) return null;
    const opt = a3.compute_optimal || {}, [lo, hi] = opt.tokens_per_param_interval || [null, null];
    return el("p", { id: "approach3" }, el("code", {}, a3.form || ""), ": compute-optimal ",
      el("b", {}, fmt(opt.tokens_per_param)), ` tokens per parameter [${fmt(lo)}, ${fmt(hi)}] at ${fmt(opt.flops, "flops")} FLOPs`,
      a3.target ? ` · the target run (${fmt(a3.target.params_active)} params, ${fmt(a3.target.tokens)} tokens): ` +
        `${fmt(a3.target.point)} [${fmt(a3.target.lo)}, ${fmt(a3.target.hi)}]` : "",
      a3.gate ? (a3.gate.registered ? " · passes the gate" : ` · refused by the gate: ${a3.gate.reasons.join("; ")}`) : "");
  }

  function drawLadder(d) {
    app.append(el("h1", {}, d.title));
    app.append(verdictLine(d));
    const fit = d.fit || {};
    const p = d.prediction;
    const hero = d.hero;
    // How far the prediction reaches: the hero's compute over the top rung's.
    const topRung = Math.max(0, ...(fit.rungs || []).map((r) => r.flops || 0));
    const reach = p && p.flops && topRung ? ` (${Math.round(p.flops / topRung)}× the top rung's compute)` : "";
    if (p) {
      app.append(el("p", { id: "prediction" }, `Pre-registered prediction of ${d.target}: `,
        sourced(el("span", { class: "predicted" }, el("b", {}, fmt(p.point)), ` [${fmt(p.lo)}, ${fmt(p.hi)}]`), d.sources.fit),
        ` (${Math.round((p.level || 0.9) * 100)}%) at ${fmt(p.flops, "flops")} FLOPs${reach}`,
        p.registered_at ? ` · registered ${p.registered_at}` : "",
        hero ? " · hero " : "", hero ? link("run", hero.id, hero.id) : "", d.hero_size ? ` (${d.hero_size})` : ""));
    }
    if (d.floor) app.append(el("p", { id: "floor" }, el("b", {}, "Floor: "), d.floor));
    if (d.gate) app.append(el("p", { id: "gate", class: d.gate.registered ? "" : "bad" },
      el("b", {}, "Registration gate: "), d.gate.text));
    if (d.inputs) app.append(el("p", { id: "fit-inputs" }, el("b", {}, "Inputs: "),
      ...d.inputs.files.flatMap((f, i) => [i ? ", " : "",
        window.GLASSLAB_SITE ? el("a", { href: f.site }, f.name) : f.name]),
      " beside fit.json; refit: ", el("code", {}, d.inputs.command)));
    const lines = chartLines(d);
    let heroIndex = -1;
    if (hero) {
      const s = hero.series[d.target] || { steps: [], values: [] };
      heroIndex = lines.length;
      lines.push({ label: `hero ${hero.id}`, color: "#1f77b4", width: 2,
        xs: s.steps.map((step, i) => xOfFlops(hero, step, s.tokens ? s.tokens[i] : tokensAt(hero, step))), ys: s.values.slice() });
    }
    const grid = section("Fit and prediction", el("div", {})).lastChild;
    const chart = new LineChart(grid, { title: `${d.target} against training compute`, lines, logx: true, logy: true,
      xlabel: "FLOPs", xunit: "flops", height: 440,
      subtitle: "x: training FLOPs outside the LM head = tokens × (FLOPs per token − the vocabulary projection's); dots: each rung's seeds; whiskers: spread over seeds and the 90% interval at the hero" });
    G.charts.ladder = chart.plot;
    chart.root.dataset.bands = String(chart.bandCount);
    if (!hero) app.append(el("p", { class: "muted" }, "No hero run yet."));

    const law = fit.law || {};
    const noise = law.noise || {};
    section("Law", el("p", {}, el("code", {}, law.form || "")),
      table(["parameter", "value ± standard error", ""],
        d.parameters.map((r) => [r.name, sourced(el("span", {}, r.text), d.sources.fit), r.note]), { class: "law" }),
      noise.sigma != null ? el("p", { class: "muted" }, `residual noise σ ${fmt(noise.sigma)} (${noise.dof ?? "?"} degrees of freedom)`) : null,
      fit.approach3 && fit.approach3.fitted === false && fit.approach3.reason
        ? el("p", { class: "muted" }, `Approach 3 not fitted: ${fit.approach3.reason}`) : null,
      approach3Line(fit.approach3));

    const rungs = fit.rungs || [];
    section("Rungs", table(["rung", "size", "active params", "tokens", "FLOPs (no LM head)", "loss per seed", "mean ± std"],
      rungs.map((r) => [r.name || "", r.size_name || "", r.params_active, r.tokens, r.flops,
        sourced(el("span", {}, ...(r.losses || []).flatMap((loss, j) => [j ? ", " : "",
          (r.run_ids || [])[j] ? link("run", r.run_ids[j], fmt(loss)) : fmt(loss)])), d.sources.fit),
        sourced(el("span", {}, (r.losses || []).length > 1 ? `${fmt(r.loss_mean)} ± ${fmt(r.loss_std)}` : fmt(r.loss_mean)),
          d.sources.fit)]),
      { units: [null, null, "count", "count", "flops"] }));

    const bt = fit.backtest;
    if (bt && (bt.steps || []).length) {
      section("Back-test", el("p", { class: "muted" }, `${bt.method || ""}; mean |error| `,
          sourced(el("span", { id: "backtest-mean" }, bt.mean_abs_rel_error_pct != null
            ? bt.mean_abs_rel_error_pct.toFixed(2) + "%" : "–"), d.sources.fit),
          " (error = (predicted − measured) / measured)"),
        table(["held out", "fitted on", "FLOPs", "extrapolation", "measured", "predicted [90%]", "error", "inside"],
          bt.steps.map((s) => [s.held_out, (s.fit_rungs || []).join(", "), s.flops,
            s.extrapolation != null ? `${s.extrapolation.toFixed(1)}×` : "", G.num(s.measured, null, d.sources.fit),
            sourced(el("span", {}, interval(s)), d.sources.fit),
            sourced(el("span", { class: "backtest-error" },
              s.rel_error_pct != null ? `${s.rel_error_pct > 0 ? "+" : ""}${s.rel_error_pct.toFixed(2)}%` : ""), d.sources.fit),
            s.covered == null ? "" : s.covered ? "yes" : "no"]),
          { class: "backtest", units: [null, null, "flops"] }));
    }
    const sweep = fit.sweep_table || [];
    if (sweep.length) {
      section("Asymptote sweep (the interval is widened to cover it)", table(["L∞", "A", "α", "prediction [90%]"],
        sweep.map((r) => [r.L_inf, r.A, r.alpha, sourced(el("span", {}, interval(r)), d.sources.fit)])));
    }
    tasksSection(d.tasks || []);
    clustersSection(d.clusters);
    registrySection(d.registry);
    sourceNotes();
    return {
      lab: G.scheduleRefresh,
      delta(runId, delta) {
        if (!hero || runId !== hero.id) return;
        trackTokens(hero, delta);
        for (const [key, step, value] of delta.scalars) {
          if (key === d.target) chart.add(heroIndex, xOfFlops(hero, step, tokensAt(hero, step)), value);
        }
      },
    };
  }

  // The hero's task accuracy: predicted by the task laws with the band, against what the hero scored.
  function tasksSection(rows) {
    if (!rows.length) return;
    const pct = (v) => (v == null ? "–" : v.toFixed(3));
    section("Task accuracy", table(["task", "chance", "predicted [90%]", "hero reached", "back-test error"],
      rows.map((r) => [r.task, pct(r.chance),
        sourced(el("span", { class: "task-predicted" }, `${pct(r.acc.point)} [${pct(r.acc.lo)}, ${pct(r.acc.hi)}]`),
          r.predicted_source),
        r.actual == null ? "–" : sourced(el("span", { class: "task-actual", "data-task": r.task }, pct(r.actual)),
          r.actual_source),
        r.backtest_points == null ? "" : `${r.backtest_points > 0 ? "+" : ""}${r.backtest_points.toFixed(1)} points`]),
      { class: "tasks" }));
  }

  // Each content cluster's held-out loss at every rung's compute (the mean over its seeds): which content
  // improves with scale and which stays flat, drawn as a line per cluster and listed by its change.
  function clustersSection(c) {
    if (!c || !c.rungs.length) return;
    const ids = [...new Set(c.rungs.flatMap((r) => Object.keys(r.losses)))].sort((a, b) => a - b);
    const name = (id) => `${id}: ${c.names[id] || `cluster ${id}`}`;
    const rungs = c.rungs.slice().sort((a, b) => a.flops - b.flops);
    const grid = section("Held-out loss per content cluster against compute", el("div", {})).lastChild;
    const chart = new LineChart(grid, { title: "eval/cluster/<c>/loss at each rung", logx: true, logy: true,
      xlabel: "FLOPs", xunit: "flops", height: 360, subtitle: `clusters of the data map ${c.map || ""}; dots: each rung (mean over its seeds)`,
      lines: ids.map((id) => ({ label: name(id), points: true, xs: rungs.map((r) => r.flops),
        ys: rungs.map((r) => r.losses[id] ?? null) })) });
    G.charts.clusters = chart.plot;
    const first = rungs[0], last = rungs[rungs.length - 1];
    const change = (id) => (first.losses[id] != null && last.losses[id] != null
      ? last.losses[id] / first.losses[id] - 1 : null);
    const byChange = ids.slice().sort((a, b) => (change(a) ?? 0) - (change(b) ?? 0));  // most improved first
    grid.append(table(["cluster", `loss at ${first.name}`, `loss at ${last.name}`, "change"],
      byChange.map((id) => [name(id), fmt(first.losses[id]), fmt(last.losses[id]),
        change(id) == null ? "–" : `${(100 * change(id)).toFixed(1)}%`]),
      { class: "cluster-scaling", rowAttrs: (i) => ({ "data-cluster": byChange[i] }) }));
  }

  function registrySection(entries) {
    if (!entries || !entries.length) {
      section("Registered predictions", el("p", { class: "muted" }, "The lab's registry (predictions/) is empty."));
      return;
    }
    const replacedBy = {};
    for (const e of entries) if (e.replaces != null) replacedBy[`${e.name}#${e.replaces}`] = e.seq;
    section("Registered predictions", el("p", { class: "muted" }, "Every entry of the lab's append-only registry, "
        + "oldest first; a replaced entry stays listed."),
      table(["name", "metric", "predicted", "target", "registered", "by", "entry", "verdict"],
        entries.map((e) => [e.name, e.metric, `${fmt(e.point)} [${fmt(e.low)}, ${fmt(e.high)}] (${Math.round(100 * (e.level || 0.9))}%)`
            + (e.status ? ` — ${e.status}` : ""),
          e.run ? link("run", e.run, e.target || e.run) : e.target || "", e.registered_at || "", e.source || "",
          e.in_force ? `#${e.seq ?? 1} in force` : `#${e.seq ?? "?"} replaced${replacedBy[`${e.name}#${e.seq}`] ? ` by #${replacedBy[`${e.name}#${e.seq}`]}` : ""}`,
          e.verdict ? el("span", {}, verdictCell(e.verdict), " ", el("span", { class: "muted small" }, e.verdict.text)) : ""]),
        { class: "registry", rowAttrs: (i) => ({ class: entries[i].in_force ? "" : "replaced" }) }));
  }

  window.GlasslabPages.ladder = drawLadder;
})();
