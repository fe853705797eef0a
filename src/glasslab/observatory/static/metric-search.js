/* glasslab observatory: finding a metric by name. A search box whose text is a regular expression
 * when it is one that uses any of its syntax (``layer_(3|4)/``, ``^eval/.*loss$``) and plain text
 * otherwise, case-insensitive either way; and the metric names grouped by prefix with counts (how
 * many match of how many), each group opening onto its names. Picking a prefix or a name searches
 * for it. Used by the run and compare pages. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el } = G;
  const SPECIAL = /[\\^$.*+?()[\]{}|]/;
  const LISTED = 300;  // names listed in an open group (the search narrows a larger one)

  /* ``{kind, test(text)}``: kind "all" (empty), "regex" or "text". */
  function matcher(query) {
    const q = (query || "").trim();
    if (!q) return { kind: "all", test: () => true };
    if (SPECIAL.test(q)) {
      try {
        const re = new RegExp(q, "i");
        return { kind: "regex", test: (text) => re.test(text) };
      } catch (err) { /* not a regular expression: plain text */ }
    }
    const lower = q.toLowerCase();
    return { kind: "text", test: (text) => text.toLowerCase().includes(lower) };
  }

  const escape = (text) => text.replace(/[\\^$.*+?()[\]{}|]/g, "\\$&");
  const prefixOf = (key) => (key.includes("/") ? `${key.split("/")[0]}/` : "(no prefix)");

  /* opts: {keys, query, placeholder, onQuery(query, event), describe(match) -> text beside the box,
   *        onPickKey(key): what picking a name in the list does (default: search for it)} */
  class MetricSearch {
    constructor(opts) {
      this.opts = opts;
      this.keys = opts.keys;
      this.input = el("input", { type: "search", name: "q", class: "filter metric-search", autocomplete: "off",
                                  placeholder: opts.placeholder || "search metrics: text or regex (layer_(3|4)/)",
                                  "aria-label": "search metrics" });
      this.input.value = opts.query || "";
      this.status = el("span", { class: "muted small search-status" });
      this.groups = el("div", { class: "key-groups" });
      this.list = el("details", { class: "key-list" }, el("summary", {}, `metrics by prefix (${this.keys.length})`),
                     this.groups);
      this.node = el("div", { class: "search-bar" }, el("div", { class: "controls" }, this.input, this.status), this.list);
      this.input.addEventListener("input", (e) => this.changed(e));
      this.list.addEventListener("toggle", () => this.render());
      this.changed(null);
    }

    // Search for ``query`` as if typed (a picked prefix or name, a link of the page).
    set(query) {
      this.input.value = query;
      this.changed(null);
    }

    changed(event) {
      this.match = matcher(this.input.value);
      this.status.textContent = this.opts.describe ? this.opts.describe(this.match) : "";
      this.render();
      if (event && this.opts.onQuery) this.opts.onQuery(this.input.value, event);
    }

    // The groups (only while the list is open: closed, it costs nothing per keypress).
    render() {
      if (!this.list.open) return;
      const byPrefix = new Map();
      for (const key of this.keys) {
        const p = prefixOf(key);
        if (!byPrefix.has(p)) byPrefix.set(p, []);
        byPrefix.get(p).push(key);
      }
      const open = new Set([...this.groups.querySelectorAll("details[open]")].map((d) => d.dataset.prefix));
      this.groups.textContent = "";
      for (const [prefix, keys] of byPrefix) {
        const matching = keys.filter((k) => this.match.test(k));
        const pick = el("button", { type: "button", class: "link-button", title: `search ${prefix}` }, prefix);
        pick.addEventListener("click", (e) => { e.preventDefault(); this.pick(prefix === "(no prefix)" ? "^[^/]+$" : `^${escape(prefix)}`); });
        const summary = el("summary", {}, pick, " ", el("span", { class: "muted" },
          matching.length === keys.length ? String(keys.length) : `${matching.length} of ${keys.length}`));
        const group = el("details", { class: "key-group", "data-prefix": prefix, "data-count": String(keys.length) }, summary);
        group.open = open.has(prefix);
        const fill = () => {
          if (group.childNodes.length > 1) return;
          const names = el("div", { class: "key-names" });
          for (const key of matching.slice(0, LISTED)) {
            const b = el("button", { type: "button", class: "link-button", "data-key": key }, key);
            b.addEventListener("click", () => (this.opts.onPickKey ? this.opts.onPickKey(key) : this.pick(`^${escape(key)}$`)));
            names.append(b);
          }
          if (matching.length > LISTED) names.append(el("span", { class: "muted" }, `… ${matching.length - LISTED} more: search to narrow`));
          group.append(names);
        };
        if (group.open) fill();
        group.addEventListener("toggle", () => { if (group.open) fill(); });
        if (matching.length || !this.input.value) this.groups.append(group);
      }
    }

    pick(query) {
      this.set(query);
      if (this.opts.onQuery) this.opts.onQuery(query, null);
    }
  }

  G.matcher = matcher;
  G.escapeRegex = escape;
  G.MetricSearch = MetricSearch;
})();
