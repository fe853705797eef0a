/* The overview: (experiments, when the lab has cards), ladders with their verdict, every run in a
 * table that sorts and filters (status, size, last loss, incidents, band verdict), data reports,
 * steps and the lab's event log. Redrawn when the lab's files change; the table keeps its sort. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt, link, table, sortableTable, section, statusCell, app } = G;

  const INCIDENT_WORDS = {
    rollback: ["rollback", "rollbacks"], prediction_out_of_band: ["out of band", "out of band"],
    spike_skipped: ["spike skipped", "spikes skipped"], step_retried: ["retry", "retries"],
    step_failed: ["failure", "failures"], node_lost: ["node lost", "nodes lost"], nonfinite: ["non-finite step", "non-finite steps"],
    checkpoint_fallback: ["checkpoint fallback", "checkpoint fallbacks"], preempted: ["preemption", "preemptions"],
    prediction_replaced: ["prediction replaced", "predictions replaced"], sink_failed: ["sink failure", "sink failures"],
  };

  function incidentText(counts) {
    const entries = Object.entries(counts || {}).sort((a, b) => b[1] - a[1]);
    return entries.map(([kind, n]) => `${n} ${(INCIDENT_WORDS[kind] || [kind, kind])[n === 1 ? 0 : 1]}`).join(" · ");
  }

  function incidentTotal(counts) { return Object.values(counts || {}).reduce((a, b) => a + b, 0); }

  /* The band verdict in a few words, coloured: "inside (+1.9%)", "outside (−7.0%) so far", "pending". */
  function verdictCell(v) {
    if (!v) return "";
    if (v.inside == null) return el("span", { class: "verdict-word pending", title: v.text }, "pending");
    const error = v.rel_error_pct == null ? "" : ` (${v.rel_error_pct > 0 ? "+" : ""}${v.rel_error_pct.toFixed(1)}%)`;
    return el("span", { class: `verdict-word ${v.inside ? "inside" : "outside"}`, title: v.text },
      `${v.inside ? "inside" : "outside"}${error}${v.state === "so_far" ? " so far" : v.state === "stopped" ? " (stopped)" : ""}`);
  }

  function verdictKey(v) { return !v || v.inside == null ? null : v.inside ? 1 : 0; }

  // Kept across redraws, so a live refresh does not lose the reader's sort and filter.
  const runTableState = { sort: null, desc: false, filter: "" };

  function drawOverview(d) {
    app.append(el("h1", {}, d.title));
    const count = (n, one, many) => `${n} ${n === 1 ? one : many}`;
    app.append(el("p", { class: "muted" }, `${d.lab_name}: ${count(d.runs.length, "run", "runs")} · `
      + `${count(d.ladders.length, "ladder", "ladders")} · ${count(d.reports.length, "data report", "data reports")} · `
      + `${count(d.steps.length, "step", "steps")}`));
    // Experiment cards (issue 19) take the first place on the page once the lab has them.
    if (d.experiments && d.experiments.length) {
      section("Experiments", table(["experiment", "status", "verdict"],
        d.experiments.map((x) => [link("experiment", x.name, x.title || x.name), statusCell(x.status),
          G.verdictBadge(x.verdict, x.verdict_text)])));
    }
    if (d.ladders.length) {
      section("Ladders", table(["ladder", "target", "rungs", "prediction", "hero", "verdict", ""],
        d.ladders.map((l) => [link("ladder", l.id, l.ladder || l.id), l.target || "", l.rungs,
          l.prediction ? `${fmt(l.prediction.point)} [${fmt(l.prediction.lo)}, ${fmt(l.prediction.hi)}] at ${fmt(l.prediction.flops, "flops")} FLOPs` : "",
          l.hero_run ? link("run", l.hero_run, l.hero_run) : "",
          l.verdict ? el("span", {}, verdictCell(l.verdict), " ", el("span", { class: "muted small" }, l.verdict.text)) : "",
          l.runs.length ? link("compare", null, "compare its runs", { runs: l.runs.join(",") }) : ""])));
    }
    const columns = [
      { title: "run", key: (r) => r.id, cell: (r) => link("run", r.id, r.id) },
      { title: "status", key: (r) => (r.unreadable ? "unreadable" : r.status), cell: (r) => statusCell(r.unreadable ? "unreadable" : r.status) },
      { title: "role", key: (r) => r.role || "" },
      { title: "ladder", key: (r) => r.ladder || "" },
      { title: "size", key: (r) => r.size_name || "" },
      { title: "step", key: (r) => r.step, unit: "count", descFirst: true },
      { title: "tokens", key: (r) => r.tokens, unit: "count", descFirst: true },
      { title: "last loss", key: (r) => r.loss, text: (r) => (r.loss == null ? "" : `${r.loss_key} ${fmt(r.loss)}`) },
      { title: "eval loss", key: (r) => r.eval_loss },
      { title: "incidents", key: (r) => incidentTotal(r.incidents) || null, descFirst: true,
        text: (r) => incidentText(r.incidents), cell: (r) => incidentText(r.incidents) },
      { title: "band", key: (r) => verdictKey(r.verdict), text: (r) => (r.verdict ? r.verdict.text : ""),
        cell: (r) => verdictCell(r.verdict) },
      { title: "", key: () => null, text: () => "", cell: (r) => link("provenance", r.id, "provenance") },
    ];
    section("Runs", d.runs.length ? sortableTable(columns, d.runs, { state: runTableState, class: "runs",
      placeholder: "filter runs: name, role, ladder, status…", rowAttrs: (r) => ({ "data-run": r.id }) })
      : el("p", { class: "muted" }, "No runs yet."));
    if (d.reports.length) section("Data", el("ul", {}, ...d.reports.map((id) => el("li", {}, link("data", id, id)))));
    if (d.steps.length) {
      section("Steps", table(["step folder", "name", "status", "attempts", "error"],
        d.steps.map((s) => [s.is_run ? link("run", s.id, s.id) : s.is_report ? link("data", s.id, s.id)
          : s.is_fit ? link("ladder", s.id, s.id) : s.id,
          s.name || "", statusCell(s.status), s.attempts ?? "", s.error ? String(s.error).slice(0, 300) : ""])));
    }
    section("Lab events", G.eventsTable(d.events.slice().reverse(), true));
    return { lab: G.scheduleRefresh };
  }

  window.GlasslabPages.overview = drawOverview;
  window.GlasslabOverview = { verdictCell };  // the ladder page shows verdicts the same way
})();
