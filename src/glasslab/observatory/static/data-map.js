/* The data page's Map section: what is in the dataset (``glasslab data map``). A picture of the content
 * domains (each a disc at its centroid's place on the two main axes of all centroids, coloured by id, its
 * area by training tokens, the largest labelled by their top terms where a label has room), a sortable
 * table of them, and on a click (disc or row) one domain's terms, the documents nearest its centroid, a
 * uniform sample, and bars of its share of each source and each source's share of it. Drawn as plain SVG: 1,000 discs stay fast. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt, section, sortableTable } = G;
  const SVG = "http://www.w3.org/2000/svg";
  const WIDTH = 760, HEIGHT = 440, PAD_X = 100, PAD_Y = 40, LABELS = 40;
  const LABEL_CHAR_PX = 6, LABEL_HEIGHT_PX = 11;  // a 10 px label's box, wide enough for its widest letters

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }

  const colour = (id) => `hsl(${(id * 137.508) % 360}, 62%, 52%)`;

  function picture(map, select) {
    const root = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, width: WIDTH, height: HEIGHT, class: "map-picture",
                              role: "img", "aria-label": "content domains of the dataset" });
    const most = Math.max(...map.clusters.map((c) => c.share || 0), 1e-9);
    const radius = (c) => 4 + 28 * Math.sqrt((c.share || 0) / most);
    const at = (c) => [PAD_X + (c.xy[0] + 1) / 2 * (WIDTH - 2 * PAD_X), PAD_Y + (1 - c.xy[1]) / 2 * (HEIGHT - 2 * PAD_Y)];
    const bySize = map.clusters.slice().sort((a, b) => (b.share || 0) - (a.share || 0));
    for (const c of bySize) {  // largest first, so small discs are drawn on top and stay clickable
      const [x, y] = at(c);
      const disc = svg("circle", { cx: x.toFixed(1), cy: y.toFixed(1), r: radius(c).toFixed(1), fill: colour(c.id),
                                   "fill-opacity": 0.75, stroke: "#fff", "data-cluster": c.id, class: "map-disc" });
      const tip = svg("title", {});
      tip.textContent = `${c.id}: ${c.name} · ${fmt(c.share, "percent")} of tokens`;
      disc.append(tip);
      disc.addEventListener("click", () => select(c));
      root.append(disc);
    }
    for (const [c, x, y] of labelPlaces(bySize, at, radius)) {
      const label = svg("text", { x: x.toFixed(1), y: y.toFixed(1), "text-anchor": "middle", class: "map-label" });
      label.textContent = c.name;
      root.append(label);
    }
    return root;
  }

  // Up to LABELS labels, largest domain first, each above its disc; one that would overlap a label already
  // placed (or leave the picture) is left out, so crowded domains stay readable rather than a blot of text.
  function labelPlaces(bySize, at, radius) {
    const placed = [], boxes = [];
    for (const c of bySize) {
      if (placed.length === LABELS) break;
      const [x, discY] = at(c);
      const y = discY - radius(c) - 3, half = LABEL_CHAR_PX * c.name.length / 2;
      const box = [x - half, y - LABEL_HEIGHT_PX, x + half, y];
      const inside = box[0] >= 0 && box[1] >= 0 && box[2] <= WIDTH;
      if (inside && !boxes.some((b) => box[0] < b[2] && b[0] < box[2] && box[1] < b[3] && b[1] < box[3])) {
        placed.push([c, x, y]);
        boxes.push(box);
      }
    }
    return placed;
  }

  function bars(entries, share) {
    return el("table", { class: "map-bars" }, el("tbody", {}, ...entries.map(([name, value]) => {
      const bar = el("div", { class: "bar" });
      bar.style.width = `${Math.max(1, Math.round(200 * Math.min(1, value[share])))}px`;
      return el("tr", {}, el("td", {}, name), el("td", {}, bar), el("td", { class: "num" }, fmt(value[share], "percent")));
    })));
  }

  function where(p) {
    const place = p.file ? `${p.file}${p.line != null ? `:${p.line}` : p.row != null ? ` row ${p.row}` : ""}`
      : p.module || (p.dataset ? `${p.dataset} #${p.record}` : "");
    return `${p.source || p.domain || ""}${place ? ` · ${place}` : ""}`;
  }

  function documents(title, list) {
    return [el("h4", {}, title), ...list.map((d) => el("div", { class: "map-document" },
      el("div", { class: "muted small" }, `${d.domain} ${d.split} #${d.document} · ${where(d.provenance || {})}`
        + ` · distance ${fmt(d.distance)}`),
      el("pre", {}, d.excerpt)))];
  }

  // What each run that trained on the dataset read from a domain: tokens recomputed from its draws, its share of
  // the run's tokens against the domain's share of the data (above 1: the run read it more than the data holds).
  const exact = (n) => Number(n).toLocaleString("en-US");  // counts recomputed exactly are shown exactly

  function runReads(map, c) {
    const reads = (map.runs || []).filter((r) => r.tokens);
    if (!reads.length) return [];
    return [el("h4", {}, "tokens each run read from the domain"),
      el("table", { class: "map-runs" }, el("tbody", {}, ...reads.map((r) => {
        const share = r.tokens[c.id] / Math.max(r.total, 1);
        return el("tr", { "data-run": r.run }, el("td", {}, r.run), el("td", { class: "num" }, exact(r.tokens[c.id])),
          el("td", { class: "num" }, fmt(share, "percent")),
          el("td", { class: "num muted" }, c.share ? `${fmt(share / c.share)}× its share` : ""));
      })))];
  }

  function runsTable(map) {
    const reads = map.runs || [];
    if (!reads.length) return el("p", { class: "muted" }, "No run has trained on this dataset yet.");
    const name = (id) => (map.clusters.find((c) => c.id === id) || {}).name || String(id);
    return el("table", { class: "map-run-table" }, el("thead", {}, el("tr", {}, el("th", {}, "run"),
      el("th", {}, "to step"), el("th", {}, "tokens read"), el("th", {}, "most read domains (share of the run's tokens)"))),
    el("tbody", {}, ...reads.map((r) => {
      if (!r.tokens) return el("tr", {}, el("td", {}, r.run), el("td", { colspan: 3, class: "muted" }, r.error || ""));
      const top = r.tokens.map((t, id) => [id, t]).sort((a, b) => b[1] - a[1]).slice(0, 3);
      return el("tr", { "data-run": r.run }, el("td", {}, r.run), el("td", { class: "num" }, fmt(r.step, "count")),
        el("td", { class: "num" }, exact(r.total)),
        el("td", {}, top.map(([id, t]) => `${id}: ${name(id)} ${fmt(t / Math.max(r.total, 1), "percent")}`).join(" · ")));
    })));
  }

  function detail(box, c, map) {
    const sources = Object.entries(c.sources || {}).sort((a, b) => b[1].tokens - a[1].tokens);
    box.textContent = "";
    box.dataset.cluster = c.id;
    box.append(el("h3", {}, `${c.id}: ${c.name}`),
      el("p", { class: "muted" }, `${fmt(c.documents, "count")} documents · ${fmt(c.tokens, "count")} tokens `
        + `(${fmt(c.share, "percent")}) · held-out ${fmt(c.heldout_tokens, "count")} tokens (${fmt(c.heldout_share, "percent")})`),
      el("p", { class: "map-terms" }, (c.terms || []).map(([w]) => w).join(" · ")),
      el("div", { class: "grid" },
        el("div", {}, el("h4", {}, "share of the domain from each source"), bars(sources, "share_of_cluster")),
        el("div", {}, el("h4", {}, "share of each source that falls in the domain"), bars(sources, "share_of_source"))),
      ...runReads(map, c),
      ...documents("nearest its centroid", c.representatives || []),
      ...documents("a uniform sample", c.samples || []));
  }

  function mapSection(map) {
    const started = performance.now();
    if (!map) {
      section("Map (what is in the data)", el("p", { class: "muted" },
        "Not mapped yet: `glasslab data map DATASET` clusters its documents into content domains."));
      return;
    }
    const box = el("div", { class: "panel", id: "map-detail" },
      el("p", { class: "muted" }, "Click a disc or a row to see a domain's terms, documents and sources."));
    const select = (c) => detail(box, c, map);
    const columns = [
      { title: "id", key: (c) => c.id },
      { title: "top terms", key: (c) => c.name, text: (c) => (c.terms || []).map(([w]) => w).join(" ") },
      { title: "documents", key: (c) => c.documents, unit: "count", descFirst: true },
      { title: "tokens", key: (c) => c.tokens, unit: "count", descFirst: true },
      { title: "share", key: (c) => c.share, cell: (c) => fmt(c.share, "percent"), descFirst: true },
      { title: "held-out share", key: (c) => c.heldout_share, cell: (c) => fmt(c.heldout_share, "percent"), descFirst: true },
      { title: "mean distance", key: (c) => c.mean_distance },
    ];
    const rows = sortableTable(columns, map.clusters, { class: "map-table", placeholder: "filter domains: terms…",
      rowAttrs: (c) => ({ "data-cluster": c.id, class: "clickable" }) });
    rows.addEventListener("click", (event) => {
      const tr = event.target.closest("tr[data-cluster]");
      if (tr) select(map.clusters.find((c) => String(c.id) === tr.dataset.cluster));
    });
    const s = map.settings || {};
    section(`Map (what is in the data): ${map.k} content domains`,
      el("p", { class: "muted" }, `${fmt(map.documents, "count")} training and ${fmt(map.heldout_documents, "count")} held-out `
        + `documents · embedder ${s.embedder} (${s.dims} dims) · ${map.fine_k} fine clusters coarsened to ${map.k}, `
        + `each at least ${fmt(s.min_share, "percent")} of the sample · ${map.folder}`),
      el("div", { class: "map-view" }, picture(map, select), box), rows,
      el("h3", {}, "What each run read, by domain (recomputed from its draws)"), runsTable(map));
    G.timing.mapMs = performance.now() - started;
  }

  G.mapSection = mapSection;
})();
