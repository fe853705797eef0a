/* The provenance page: where a run came from — code version, packages, data manifest, the resolved
 * config (secrets redacted), its pre-registered prediction and its step record. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, link, table, section, app } = G;

  function drawProvenance(d) {
    app.append(el("h1", {}, d.title));
    const r = d.record;
    app.append(el("p", {}, link("run", d.id, "back to the run")));
    if (!r) { app.append(el("p", { class: "warn" }, "run.json is missing or being written.")); return { lab: G.scheduleRefresh }; }
    const code = r.code || {};
    section("Run", table(["field", "value"], [["size", r.size_name || ""], ["role", r.role || ""],
      ["started", r.started || ""], ["host", r.host || ""], ["platform", r.platform || ""], ["python", r.python || ""],
      ["code commit", code.commit || "unknown"], ["uncommitted changes", code.dirty ? `yes (diff sha256 ${code.diff_sha256})` : "no"],
      ["data manifest", r.data_manifest_hash || r.manifest_hash || (r.data || {}).manifest_hash || "–"],
      ["FLOPs/token", r.flops_per_token ?? "–"]], { units: [null, "flops"] }));
    section("Config (secrets redacted)", el("pre", {}, JSON.stringify(r.config || {}, null, 2)));
    section("Packages", table(["package", "version"], Object.entries(r.packages || {})));
    if (r.prediction) section("Pre-registered prediction", el("pre", {}, JSON.stringify(r.prediction, null, 2)));
    if (d.step) section("Step (step.json)", el("pre", {}, JSON.stringify(d.step, null, 2)));
    return { lab: G.scheduleRefresh };
  }

  window.GlasslabPages.provenance = drawProvenance;
})();
