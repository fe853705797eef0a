/* glasslab observatory: what every page shares — links (live server or static site), tables that
 * sort and filter, sections, loading the page's data, and following it live.
 * Live site: data from /api/page, updates from one EventSource per page (polling /api/delta with the
 * cursor while the stream is down). Static site: data from a script that set GLASSLAB_DATA. */
(function () {
  "use strict";
  const { el } = window.GlasslabCharts;
  const { fmt } = window.GlasslabFormat;
  const BOOT = window.GLASSLAB_BOOT;
  const STATIC = BOOT.mode === "static";
  const app = document.getElementById("app");

  /* The URL of a page (``query``: extra parameters, e.g. the compare page's view). */
  function href(page, id, query) {
    const params = query ? `?${new URLSearchParams(query)}` : "";
    if (STATIC) {
      const links = (window.GLASSLAB_SITE || {}).links || {};
      const target = links[id == null ? page : `${page}:${id}`];
      return target ? target + params : null;
    }
    if (page === "overview") return "/";
    if (page === "compare") return `/compare${params}`;
    return `/${page}/${String(id).split("/").map(encodeURIComponent).join("/")}${params}`;
  }

  function link(page, id, text, query) {
    const target = href(page, id, query);
    return target ? el("a", { href: target }, text) : el("span", {}, text);
  }

  function cell(value, unit) {
    if (value instanceof Node) return el("td", {}, value);
    if (typeof value === "number") return el("td", { class: "num" }, fmt(value, unit));
    return el("td", {}, value == null ? "" : value);
  }

  /* A table; ``opts.units`` gives each column's number unit, ``opts.rowAttrs(i)`` row attributes. */
  function table(headers, rows, opts) {
    opts = opts || {};
    const units = opts.units || [];
    const head = el("tr", {}, ...headers.map((h) => el("th", {}, h)));
    const body = rows.map((row, i) => el("tr", opts.rowAttrs ? opts.rowAttrs(i) : {},
      ...row.map((value, j) => cell(value, units[j]))));
    return el("table", { class: opts.class || null }, el("thead", {}, head), el("tbody", {}, ...body));
  }

  /* A table the reader sorts (click a header; again to reverse) and filters (words in the box must
   * all appear in the row). ``columns``: [{title, key(row) -> sort value, cell(row) -> node|value,
   * unit}]; rows are re-rendered in place, so a live refresh keeps the sort and the filter. */
  function sortableTable(columns, rows, opts) {
    opts = opts || {};
    const state = opts.state || { sort: opts.sort ?? null, desc: false, filter: "" };
    const box = el("div", { class: "sortable" });
    const input = el("input", { type: "search", class: "filter", placeholder: opts.placeholder || "filter rows…",
                                "aria-label": "filter rows" });
    input.value = state.filter;
    const count = el("span", { class: "muted small" });
    const tbody = el("tbody", {});
    const headers = columns.map((c, i) => {
      const th = el("th", { class: "sort", "data-column": String(i), title: "sort by this column" }, c.title);
      th.addEventListener("click", () => {
        state.desc = state.sort === i ? !state.desc : Boolean(c.descFirst);
        state.sort = i;
        render();
      });
      return th;
    });
    const text = (row) => columns.map((c) => {
      const v = c.text ? c.text(row) : c.key(row);
      return v == null ? "" : String(v);
    }).join(" ").toLowerCase();
    const render = () => {
      const words = state.filter.toLowerCase().split(/\s+/).filter(Boolean);
      let shown = rows.filter((row) => words.every((w) => text(row).includes(w)));
      if (state.sort != null) {
        const key = columns[state.sort].key;
        shown = shown.slice().sort((a, b) => {
          const x = key(a), y = key(b);
          if (x == null && y == null) return 0;
          if (x == null) return 1;
          if (y == null) return -1;
          const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
          return state.desc ? -order : order;
        });
      }
      headers.forEach((th, i) => { th.dataset.sorted = state.sort === i ? (state.desc ? "desc" : "asc") : ""; });
      tbody.textContent = "";
      for (const row of shown) {
        tbody.appendChild(el("tr", opts.rowAttrs ? opts.rowAttrs(row) : {},
          ...columns.map((c) => cell(c.cell ? c.cell(row) : c.key(row), c.unit))));
      }
      count.textContent = `${shown.length} of ${rows.length}`;
    };
    input.addEventListener("input", () => { state.filter = input.value; render(); });
    render();
    box.append(el("div", { class: "controls" }, input, count),
               el("table", { class: opts.class || null }, el("thead", {}, el("tr", {}, ...headers)), tbody));
    box.state = state;
    return box;
  }

  /* Events as a table (``lab``: the lab's event log, with subjects); each row is #event-<id>.
   * ``stepLink(event)``: a node for a run event's step cell (a link to its batch), or null. */
  function eventsTable(events, lab, stepLink) {
    if (!events.length) return el("p", { class: "muted" }, "No events.");
    const headers = lab ? ["time", "kind", "subject", "title", "body"] : ["step", "time", "kind", "title", "body"];
    return table(headers, events.map((e) => {
      const when = new Date(e.time * 1000).toISOString().replace("T", " ").slice(0, 19);
      const step = (stepLink && stepLink(e)) || (e.step ?? "");
      return lab ? [when, e.kind, e.subject, e.title, e.body] : [step, when, e.kind, e.title, e.body];
    }), { rowAttrs: (i) => ({ id: `event-${events[i].id}`, class: `sev-${events[i].severity}` }) });
  }

  // Tokens at ``step`` from the run's train/tokens series (linear between points, for live points).
  function tokensAt(run, step) {
    const t = run.tokens;
    if (!t || !t.steps.length) return null;
    const xs = t.steps, ys = t.values;
    let j = xs.findIndex((s) => s >= step);
    if (j === -1) j = xs.length - 1;
    if (xs[j] === step) return ys[j];
    if (xs.length < 2) return xs[0] ? ys[0] * step / xs[0] : null;
    const a = Math.max(0, j - 1), b = Math.max(1, j);
    return ys[a] + (ys[b] - ys[a]) * (step - xs[a]) / (xs[b] - xs[a]);
  }

  function trackTokens(run, delta) {
    for (const [key, step, value] of delta.scalars) {
      if (key !== "train/tokens") continue;
      run.tokens = run.tokens || { steps: [], values: [] };
      window.GlasslabCharts.upsert({ xs: run.tokens.steps, ys: run.tokens.values }, step, value);
    }
  }

  function section(title, ...children) {
    const s = el("section", {}, el("h2", {}, title), ...children);
    app.appendChild(s);
    return s;
  }

  /* Where a number comes from (``glasslab/sources.py``: the command that recomputes it, or the file and key
   * it is read from): on hover over ``node``, and listed once in the page's "Sources" section. */
  const pageSources = [];
  function sourced(node, source) {
    if (!source || !source.text) return node;
    node.classList.add("sourced");
    node.dataset.source = source.text;
    node.dataset.sourceKind = source.kind;
    node.title = `${source.kind === "command" ? "recomputed by" : "read from"}: ${source.text}`;
    if (!pageSources.some((s) => s.text === source.text)) pageSources.push(source);
    return node;
  }

  /* A number formatted as tables format it, with its source on hover. */
  function num(value, unit, source) {
    return sourced(el("span", { class: "num" }, value == null ? "–" : fmt(value, unit)), source);
  }

  /* Every source the page's numbers named (commands first, each once), as a note and a list; the list
   * starts afresh for the next drawing of the page. */
  function sourceList() {
    if (!pageSources.length) return null;
    const ordered = pageSources.filter((s) => s.kind === "command").concat(pageSources.filter((s) => s.kind !== "command"));
    pageSources.length = 0;
    return [el("p", { class: "muted" }, "Hover a number to see where it comes from. Commands run in the folder "
        + "that holds the lab; files are named under it."),
      el("ul", { id: "sources" }, ...ordered.map((s) => el("li", { "data-source-kind": s.kind },
        s.kind === "command" ? el("code", {}, s.text) : el("span", {}, "read from ", el("code", {}, s.text)))))];
  }

  function sourceNotes() {
    const nodes = sourceList();
    return nodes && section("Where the numbers come from", ...nodes);
  }

  function statusCell(status) { return el("span", { class: `status status-${status}` }, status || "–"); }

  function nav() {
    const n = document.getElementById("nav");
    n.textContent = "";
    n.append(link("overview", null, "overview"), link("compare", null, "compare"));
  }

  function setLive(on) {
    const badge = document.getElementById("live");
    badge.className = on ? "live-on" : "live-off";
    badge.textContent = STATIC ? "snapshot" : on ? "live" : "reconnecting…";
  }

  async function loadData(query) {
    if (STATIC) return window.GLASSLAB_DATA;
    const params = new URLSearchParams(query || BOOT.query || {});
    if (BOOT.id != null) params.set("id", BOOT.id);
    const response = await fetch(`/api/page/${BOOT.page}?${params}`, { cache: "no-store" });
    if (!response.ok) throw new Error(`${response.status} ${await response.text()}`);
    return response.json();
  }

  /* One stream per page. On error: close it, poll /api/delta with our cursor until the server
   * answers (a restart), then reopen the stream; after repeated stream failures keep polling.
   * ``handler``: {delta(runId, delta), lab()}; ``query()`` gives the page's current parameters. */
  function follow(data, handler, query) {
    if (STATIC) { setLive(false); return; }
    let cursors = data.cursors || {};
    let failures = 0, labStamp = null, source = null;
    const params = () => {
      const p = new URLSearchParams(query ? query() : BOOT.query || {});
      p.set("page", BOOT.page);
      if (BOOT.id != null) p.set("id", BOOT.id);
      p.set("cursor", JSON.stringify(cursors));
      return p;
    };
    const apply = (msg) => {
      if (msg.cursors) cursors = Object.assign(cursors, msg.cursors);
      for (const [runId, delta] of Object.entries(msg.runs || {})) handler.delta(runId, delta);
    };
    const open = () => {
      source = new EventSource(`/api/stream?${params()}`);
      source.addEventListener("hello", () => { failures = 0; setLive(true); });
      source.addEventListener("delta", (e) => apply(JSON.parse(e.data)));
      source.addEventListener("lab", () => handler.lab && handler.lab());
      source.onerror = () => { source.close(); setLive(false); failures += 1; setTimeout(poll, 500); };
    };
    const poll = async () => {
      try {
        const response = await fetch(`/api/delta?${params()}`, { cache: "no-store" });
        if (!response.ok) throw new Error(String(response.status));
        const msg = await response.json();
        apply(msg);
        if (labStamp !== null && msg.lab !== labStamp && handler.lab) handler.lab();
        labStamp = msg.lab;
        if (failures < 4) open(); else setTimeout(poll, 1000);
      } catch (err) {
        setTimeout(poll, Math.min(4000, 500 * failures));
      }
    };
    if (window.EventSource) open(); else { failures = 4; poll(); }  // no streams here: poll only
    return {
      // A page whose set of runs changed (the compare page's picker) follows the new set.
      restart(newCursors) {
        cursors = newCursors || {};
        if (source) { source.onerror = null; source.close(); }
        if (window.EventSource && failures < 4) open();
      },
    };
  }

  window.Glasslab = { BOOT, STATIC, app, el, fmt, href, link, table, sortableTable, section, statusCell, sourced,
                      num, sourceList, sourceNotes,
                      nav, setLive, loadData, follow, eventsTable, tokensAt, trackTokens,
                      charts: {},
                      // Milliseconds since navigation: the page's data in hand, its first chart drawn,
                      // the last search's charts drawn (bench/observatory_bench.py reads them); how long
                      // the data page's map took to draw.
                      timing: { data: null, firstChart: null, filter: null, mapMs: null } };
  window.GLASSLAB_TIMING = window.Glasslab.timing;
  window.GlasslabPages = {};
  window.GLASSLAB_CHARTS = window.Glasslab.charts;  // uPlot instances by title, for tests and scripts
})();
