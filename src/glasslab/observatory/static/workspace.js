/* glasslab observatory: a page's workspace — the search, the pinned charts in their order, smoothing
 * (page-wide and per chart), the charts drawn as lines instead of grouped, the MoE layer shown.
 *
 * It lives in the URL (?q=…&pin=Loss&pin=train/loss&smooth=0.6&smooth=0.9:Loss&lines=…&layer=3), so a
 * link reproduces the view and a published site restores it, and it is remembered per lab in the
 * browser's storage (all of it but the search and the layer). A URL that names any part of the
 * workspace shows exactly that workspace; one that names none shows what this browser remembers.
 * The page writes the whole workspace into the URL whenever it changes, so a copied URL is complete. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const PARAMS = ["q", "pin", "smooth", "lines", "layer"];

  function blank() { return { q: "", pins: [], smooth: { page: 0, charts: {} }, lines: [], layer: null }; }

  const level = (v) => { const x = Number(v); return Number.isFinite(x) ? Math.min(0.99, Math.max(0, x)) : null; };

  function fromParams(params) {
    const state = blank();
    state.q = params.get("q") || "";
    state.pins = [...new Set(params.getAll("pin").filter(Boolean))];
    for (const value of params.getAll("smooth")) {
      const colon = value.indexOf(":");
      const v = level(colon < 0 ? value : value.slice(0, colon));
      if (v == null) continue;
      if (colon < 0) state.smooth.page = v; else state.smooth.charts[value.slice(colon + 1)] = v;
    }
    state.lines = [...new Set(params.getAll("lines").filter(Boolean))];
    const layer = params.get("layer");
    state.layer = layer != null && /^\d+$/.test(layer) ? Number(layer) : null;
    return state;
  }

  function fromStorage(raw) {
    const state = blank();
    if (!raw || typeof raw !== "object") return state;
    if (Array.isArray(raw.pins)) state.pins = raw.pins.filter((p) => typeof p === "string");
    if (Array.isArray(raw.lines)) state.lines = raw.lines.filter((p) => typeof p === "string");
    if (raw.smooth && typeof raw.smooth === "object") {
      state.smooth.page = level(raw.smooth.page) || 0;
      for (const [id, v] of Object.entries(raw.smooth.charts || {})) if (level(v) != null) state.smooth.charts[id] = level(v);
    }
    return state;
  }

  class Workspace {
    /* ``scope``: the storage key, one per lab and page kind (``glasslab:<lab>:run``). */
    constructor(scope) {
      this.scope = scope;
      const params = new URLSearchParams(window.location.search);
      if (PARAMS.some((p) => params.has(p))) {
        this.origin = "url";
        this.state = fromParams(params);
      } else {
        let raw = null;
        try { raw = JSON.parse(window.localStorage.getItem(scope) || "null"); } catch (err) { /* no storage here */ }
        this.origin = raw ? "storage" : "default";
        this.state = fromStorage(raw);
        if (raw) this.save();  // the URL shows the remembered workspace, ready to be shared
      }
    }

    smoothing(id) { return this.state.smooth.charts[id] ?? this.state.smooth.page; }

    // The page's URL parameters: the workspace's, after any others the page has (none on a run page).
    params() {
      const params = new URLSearchParams(window.location.search);
      for (const p of PARAMS) params.delete(p);
      const s = this.state;
      if (s.q) params.set("q", s.q);
      for (const id of s.pins) params.append("pin", id);
      if (s.smooth.page) params.append("smooth", String(s.smooth.page));
      for (const [id, v] of Object.entries(s.smooth.charts)) params.append("smooth", `${v}:${id}`);
      for (const id of s.lines) params.append("lines", id);
      if (s.layer != null) params.set("layer", String(s.layer));
      return params;
    }

    save() {
      const query = this.params().toString();
      try {
        history.replaceState(null, "", `${window.location.pathname}${query ? `?${query}` : ""}${window.location.hash}`);
      } catch (err) { /* file:// may refuse */ }
      const s = this.state;
      try {
        window.localStorage.setItem(this.scope, JSON.stringify({ pins: s.pins, lines: s.lines, smooth: s.smooth }));
      } catch (err) { /* storage full or off: the URL still holds the view */ }
    }
  }

  G.Workspace = Workspace;
})();
