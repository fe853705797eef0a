/* An experiment's card: the question and design it was declared with, each expectation's band and
 * actual value, the verdict from the decision rule, its runs, incidents (linked to the runs), total
 * compute and time, conclusions and the card's stored versions. Numbers arrive pre-formatted
 * (``*_text``), so the page shows the same digits as ``glasslab card NAME --markdown``. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, link, table, section, statusCell, app, sourced, sourceNotes } = G;

  /* The verdict as a coloured word with its line: "confirmed", "refuted", "open". */
  function verdictBadge(verdict, text) {
    if (!verdict) return "";
    return el("span", { class: "card-verdict" }, el("span", { class: `verdict-word ${verdict}`, "data-verdict": verdict }, verdict),
      " ", el("span", { class: "muted small" }, text || ""));
  }
  G.verdictBadge = verdictBadge;

  const pageLink = (page, id, text) => (page ? link(page, id, text) : text);

  function drawExperiment(d) {
    const c = d.card;
    app.append(el("h1", {}, c.title));
    app.append(el("p", { class: "verdict-line" }, "Verdict: ", verdictBadge(c.verdict, c.verdict_text)));
    app.append(el("p", { class: "card-question" }, el("strong", {}, "Question. "), c.question || "none stated"));
    if (c.design) app.append(el("p", { class: "muted" }, el("strong", {}, "Design. "), c.design));
    section("Expectations", c.expectations.length ? table(
      ["expectation", "metric", "step", "source", "predicted", "band", "actual", "result"],
      c.expectations.map((e) => [e.name, e.metric, e.folder ? pageLink(e.page, e.folder, e.step) : e.step, e.source,
        sourced(el("span", { class: "predicted" }, e.point_text || "–"), (e.sources || {}).predicted),
        e.band_text + (e.unit ? ` ${e.unit}` : ""),
        sourced(el("span", { class: "actual" }, e.actual_display), (e.sources || {}).actual),
        el("span", { class: `verdict-word ${e.inside === true ? "inside" : e.inside === false ? "outside" : "pending"}` },
          e.inside_text)]), { class: "expectations" })
      : el("p", { class: "muted" }, "The card states no expectations."));
    section("Runs", table(["step", "folder", "status", "attempts", "seconds"],
      c.steps.map((s) => [s.name, pageLink(s.page, s.folder, s.folder), statusCell(s.status), s.attempts ?? "–",
        s.seconds == null ? "–" : s.seconds.toFixed(1)])),
      sourced(el("p", { class: "muted totals" }, `Total: ${c.totals.text}.`), c.totals.source));
    section("Incidents", c.incidents.length ? table(["incident", "run", "at step", "what"],
      c.incidents.map((i) => [i.word, pageLink(i.page, i.folder, i.folder), i.at_step ?? "", i.title]),
      { class: "incidents" }) : el("p", { class: "incidents-none" }, "none"));
    if (c.conclusions.length) {
      section("Conclusion", el("ul", {}, ...c.conclusions.map((x) => el("li", {}, `${x.text} (${x.time})`))));
    }
    section("Card versions", table(["version", "sha256", "stored", "code commit"],
      c.versions.map((v) => [`v${v.version}${v.version === c.version ? " (this run)" : ""}`, (v.hash || "").slice(0, 16),
        v.stored_at || "", (v.commit || "unknown").slice(0, 12)])));
    sourceNotes();
    app.append(el("p", {}, link("overview", null, "back to the overview")));
    return { lab: G.scheduleRefresh };
  }

  window.GlasslabPages.experiment = drawExperiment;
})();
