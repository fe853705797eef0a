/* Generated text with the spans found verbatim in the training data highlighted (observatory/sample_trace.py
 * traces them; the run page's samples and a post-training run's recorded replies draw them here).
 *
 *   G.tracedText(text, spans, key) -> a node: the text with each span a <mark> linking to its entry
 *   G.traceNote(trace) -> a line saying why samples are not traced (and the command that fixes it), or null
 *
 * A span is {char_start, char_end, text, count, heldout_count, documents: [{domain, document, source,
 * before, after}]}; ``key`` makes the entries' ids unique on the page. Clicking a span opens the list of
 * spans under the text and goes to its entry: each document's source and its text around the match. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el } = G;

  function describeSource(s) {
    if (!s) return "source not recorded";
    const where = ["file", "line", "row", "module", "dataset", "record"].filter((k) => k in s).map((k) => `${k} ${s[k]}`);
    return `${s.source}: ${where.join(" ")}`;
  }

  function times(span) {
    return `${span.count}× in the training data${span.heldout_count ? `, ${span.heldout_count}× in the held-out split` : ""}`;
  }

  // Where a span sits in the text as shown: its offsets, or (a public copy that changed the text) its first
  // occurrence; null when it is not there.
  function locate(text, span) {
    if (text.slice(span.char_start, span.char_end) === span.text) return [span.char_start, span.char_end];
    const at = span.text ? text.indexOf(span.text) : -1;
    return at < 0 ? null : [at, at + span.text.length];
  }

  // A span's first words on one line: the whole span is marked in the text above and in each document below.
  function excerpt(text) {
    const line = text.replace(/\s+/g, " ").trim();
    return line.length > 80 ? `${line.slice(0, 77)}…` : line;
  }

  function tracedText(text, spans, key) {
    text = String(text ?? "");
    if (!spans || !spans.length) return el("pre", {}, text);
    const shown = el("pre", { class: "traced" });
    const entries = el("ol", { class: "trace-spans" });
    const details = el("details", { class: "trace-docs", id: `trace-${key}` },
      el("summary", {}, `${spans.length} span(s) found in the training data`), entries);
    let at = 0;
    spans.forEach((span, i) => {
      const id = `trace-${key}-${i + 1}`;
      const docs = span.documents || [];
      const first = docs[0];
      const where = locate(text, span);
      if (where && where[1] > at) {
        const start = Math.max(at, where[0]);  // maximal spans may overlap: each character is marked once
        shown.append(text.slice(at, start));
        const link = el("a", { class: "traced-span", href: `#${id}`, "data-span": i + 1,
          title: `${times(span)}${first ? ` · ${first.domain} document ${first.document} · ${describeSource(first.source)}` : ""}` },
          el("mark", {}, text.slice(start, where[1])));
        link.addEventListener("click", () => { details.open = true; });
        shown.append(link);
        at = Math.max(at, where[1]);
      }
      entries.append(el("li", { id },
        el("div", { class: "trace-span-head" }, el("code", {}, excerpt(span.text)), ` · ${times(span)}`),
        ...docs.map((d) => el("div", { class: "trace-doc" },
          el("div", { class: "trace-source" }, `${d.domain} document ${d.document} · ${describeSource(d.source)}`),
          el("pre", { class: "trace-context" }, d.before || "", el("mark", {}, span.text), d.after || "")))));
    });
    shown.append(text.slice(at));
    return el("div", { class: "traced-text" }, shown, details);
  }

  function traceNote(trace) {
    if (!trace || trace.status === "traced") return null;
    return el("p", { class: "muted trace-note" }, `${trace.message}.`,
      ...(trace.command ? [" Build it with ", el("code", {}, trace.command), " and reload the page."] : []));
  }

  G.tracedText = tracedText;
  G.traceNote = traceNote;
})();
