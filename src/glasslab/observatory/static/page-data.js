/* The data page: warnings first (a domain read many times, an eval split as large as training), the
 * processing funnel per domain, how the build ran (each stage's tasks, seconds and MB/s; a build still
 * running shows its stages live), the domains, how every run that trained on the dataset did on each
 * domain (mixture weight, epochs, held-out loss), the mixture plan, sources, lengths and samples. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt, link, table, section, statusCell, app, num, sourced, sourceNotes } = G;
  const REPEAT_LIMIT = 4;

  function bar(fraction, width) {
    const b = el("div", { class: "bar" });
    b.style.width = `${Math.max(1, Math.round(width * Math.max(0, Math.min(1, fraction))))}px`;
    return b;
  }

  // Stage rows × domain columns: documents left after each stage, as a share of the domain's raw count.
  function funnelSection(r, source) {
    const byDomain = r.funnel_by_domain;
    const totals = r.funnel || [];
    if (!byDomain || !Object.keys(byDomain).length) {
      const top = Math.max(1, ...totals.map((f) => f.documents || 0));
      section("Funnel (all domains)", table(["stage", "documents", "", "bytes", "tokens"],
        totals.map((f) => [f.stage, f.documents, bar((f.documents || 0) / top, 200), f.bytes, f.tokens ?? ""]),
        { units: [null, "count", null, "bytes", "count"] }),
        el("p", { class: "muted" }, "This dataset's build did not record the funnel per domain."));
      return;
    }
    const domains = Object.keys(byDomain);
    const stages = [...new Set(domains.flatMap((dm) => byDomain[dm].map((f) => f.stage)))];
    const at = (domain, stage) => byDomain[domain].find((f) => f.stage === stage) || {};
    const rows = stages.map((stage) => [stage, ...domains.map((dm) => {
      const raw = at(dm, "raw").documents || 0;
      const f = at(dm, stage);
      if (f.documents == null) return "";
      const share = raw ? f.documents / raw : 0;
      return el("div", { class: "funnel-cell" },
        sourced(el("span", { class: "num" }, `${fmt(f.documents, "count")} (${Math.round(100 * share)}%)`), source),
        bar(share, 90), f.tokens != null ? el("span", { class: "muted small" }, `${fmt(f.tokens, "count")} tokens`) : null);
    }), totals.find((f) => f.stage === stage)?.documents ?? ""]);
    section("Funnel per domain (documents left after each stage)",
      table(["stage", ...domains, "all domains"], rows, { class: "funnel", units: [null, ...domains.map(() => null), "count"] }));
  }

  // One row per stage: tasks (those a resumed build found done), seconds, input MB/s in all and per
  // worker, documents in and kept, tasks run again after a worker died.
  function stagesTable(build, stageSource) {
    const workers = build.workers || 1;
    const rows = (build.stages || []).map((s) => [s.stage,
      `${fmt(s.tasks_done, "count")}/${fmt(s.tasks, "count")}` + (s.tasks_reused ? ` (${fmt(s.tasks_reused, "count")} reused)` : ""),
      s.seconds, s.mb_per_s, s.mb_per_s / workers, s.documents_in, keptCell(s, stageSource),
      s.reruns || 0,
      s.status === "running" && s.tasks_done > (s.tasks_reused || 0) && s.tasks_done < s.tasks
        ? `${fmt(s.seconds / (s.tasks_done - (s.tasks_reused || 0)) * (s.tasks - s.tasks_done))} s` : ""]);
    return table(["stage", "tasks", "seconds", "MB/s", "MB/s per worker", "documents in", "kept", "reruns", "ETA"],
      rows, { class: "build-stages", units: [null, null, null, null, null, "count", "count", "count", null],
              rowAttrs: (i) => ({ "data-stage": build.stages[i].stage, "data-status": build.stages[i].status || "" }) });
  }

  // What a stage put out: documents kept, unless the stage names another count (candidate pairs, …).
  function keptCell(s, stageSource) {
    const count = num(s.documents_kept, "count", stageSource);
    if (!s.counts || s.counts === "docs kept") return count;
    return el("span", {}, count, " ", el("span", { class: "muted small" }, s.counts));
  }

  function buildSection(build, stageSource) {
    if (!build) return;
    const how = build.backend === "ray" ? `${build.workers || "?"} Ray task(s) at once`
      : `${build.workers || "?"} local worker process(es)`;
    if (build.state === "done") {
      section("Build (stages as tasks)", el("p", { class: "muted" },
        `${how}, ${fmt(build.seconds)} s` + (build.reruns && build.reruns.length
          ? ` · ${build.reruns.length} time(s) a worker died and its tasks ran again` : "")), stagesTable(build, stageSource));
      return;
    }
    const age = build.age_s != null ? ` · last progress ${fmt(Math.max(0, build.age_s))} s ago` : "";
    const state = build.state === "running" ? "Build in progress"
      : build.state === "interrupted" ? "Build interrupted (its process is gone; the same build run again resumes)"
        : `Build stopped (${build.state})`;
    app.append(el("div", { class: build.state === "running" ? "panel" : "warn", id: "build-progress" },
      el("b", {}, state), el("span", { class: "muted" }, ` · ${how}${age}`), stagesTable(build, stageSource)));
  }

  function runsSection(d, domains) {
    if (!d.runs.length) {
      section("Runs trained on this dataset", el("p", { class: "muted" }, "No run in this lab names this dataset yet."));
      return;
    }
    section("Runs trained on this dataset (latest values)",
      table(["run", "role", "size", "status", ...domains.map((dm) => `${dm}: weight · epochs · eval loss (bpb)`)],
        d.runs.map((run) => [link("run", run.id, run.id), run.role || "", run.size_name || "", statusCell(run.status),
          ...domains.map((dm) => {
            const v = run.domains[dm] || {};
            const epochs = v.epochs != null ? el("span", { class: v.epochs > REPEAT_LIMIT ? "over" : "" }, `${fmt(v.epochs)} ep`) : "– ep";
            return el("span", {}, v.weight != null ? fmt(v.weight, "percent") : "–", " · ", epochs, " · ",
              v.loss != null ? fmt(v.loss) : "–", v.bpb != null ? ` (${fmt(v.bpb)})` : "");
          })]), { class: "domain-runs" }));
  }

  function drawData(d) {
    app.append(el("h1", {}, d.title));
    const r = d.report;
    if (!r) {
      if (d.build) buildSection(d.build, d.sources.stages);
      else app.append(el("p", { class: "warn" }, "report.json is missing or being written."));
      return { lab: G.scheduleRefresh };
    }
    app.append(el("p", { class: "muted" }, `manifest ${r.manifest_hash || "–"} · python ${r.python_version || "–"}`
      + (r.vocab_size ? ` · vocabulary ${r.vocab_size} tokens` : "")));
    if (d.warnings.length) {
      app.append(el("div", { class: "warn", id: "data-warnings" }, el("b", {}, "Warnings"),
        el("ul", {}, ...d.warnings.map((w) => el("li", { "data-kind": w.kind }, w.text)))));
    }
    funnelSection(r, d.sources.funnel);
    buildSection(d.build, d.sources.stages);
    section("Filters (documents dropped by each)", table(["filter", "dropped"],
      Object.entries(r.filters || {}).map(([k, v]) => [k, v]), { units: [null, "count"] }));
    const domains = Object.entries(r.domains || {});
    section("Domains", table(["domain", "documents", "tokens", "bytes", "bytes/token", "eval docs", "eval tokens", "eval / train"],
      domains.map(([name, x]) => [name, num(x.documents, "count", d.sources.report), num(x.tokens, "count", d.sources.report),
        x.bytes, x.bytes_per_token, x.eval_documents, x.eval_tokens,
        x.tokens ? el("span", { class: x.eval_tokens >= x.tokens ? "over" : "" }, fmt(x.eval_tokens / x.tokens, "percent")) : ""]),
      { units: [null, "count", "count", "bytes", null, "count", "count"] }));
    runsSection(d, domains.map(([name]) => name));
    const mixture = r.mixture;
    if (mixture) {
      section(`Mixture plan (token budget ${fmt(mixture.token_budget, "count")})`, table(["start step", "weights", "tokens", "epochs"],
        (mixture.phases || []).map((ph) => [ph.start_step,
          Object.entries(ph.weights || {}).map(([k, v]) => `${k} ${fmt(v, "percent")}`).join(", "),
          Object.entries(ph.tokens || {}).map(([k, v]) => `${k} ${fmt(v, "count")}`).join(", "),
          Object.entries(ph.epochs || {}).map(([k, v]) => `${k} ${fmt(v)}`).join(", ")])));
    }
    section("Sources", table(["name", "domain", "kind", "path", "provenance", "licence"],
      (r.sources || []).map((s) => [s.name, s.domain, s.kind, s.path, s.provenance, s.licence])));
    const lengths = section("Document lengths by domain (tokens)", el("div", { class: "grid" })).lastChild;
    for (const [name, x] of domains) {
      const h = x.length_histogram || { edges: [], counts: [] };
      const most = Math.max(1, ...h.counts);
      lengths.append(el("div", { class: "panel" }, el("h3", {}, name), table(["length", "documents", ""],
        h.counts.map((count, i) => [`${fmt(h.edges[i], "count")}–${fmt(h.edges[i + 1], "count")}`, count, bar(count / most, 160)]))));
    }
    const samples = section("Samples by domain");
    for (const [name, x] of domains) {
      samples.append(el("h3", {}, name));
      for (const text of x.samples || []) samples.append(el("pre", {}, text));
    }
    const errors = r.errors || {};
    const malformed = errors.malformed_lines || [];
    if (errors.invalid_utf8 || errors.malformed_count || malformed.length) {
      section("Input errors", el("p", {}, `invalid UTF-8: ${fmt(errors.invalid_utf8 || 0, "count")} · malformed lines: `
        + `${fmt(errors.malformed_count || malformed.length, "count")}`),
        malformed.length ? el("pre", {}, malformed.map((m) => (typeof m === "string" ? m : JSON.stringify(m))).join("\n")) : null);
    }
    sourceNotes();
    return { lab: G.scheduleRefresh };
  }

  window.GlasslabPages.data = drawData;
})();
