/* glasslab observatory: where a page's series come from, asked for by the charts about to be drawn.
 * Live: /api/series and /api/vectors (repeated ``key`` parameters, a batch at a time), series at the
 * resolution a chart needs (``points``: a heatmap row or a small multiple asks for OVERVIEW points).
 * Static site: the run's index script says which chunk script holds each metric (publish.py); chunks
 * load once and hold the full resolution.
 * Everything read is kept per run and metric, and live points are folded into what is kept, so a
 * chart drawn again (a filter, a toggle, a pin) costs no request. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const BATCH = 96;  // metrics per request (the server reads at most 256 at once)
  // Points of a heatmap row or a small multiple (a full chart gets the server's 2,000): the width of a
  // vector heatmap, and few enough that a 100,000-step metric reads its 256-step rollups (390 rows).
  const OVERVIEW = 240;
  // runId -> {scalars: {key: {steps, values, min?, max?}}, "scalars@240": {…}, vectors: {key: {steps, values}}}
  const kept = {};
  const asked = {};  // `${runId}\n${kind}\n${key}` -> promise of the batch that brings it
  const indexFiles = {};  // runId -> the static site's index script

  function store(runId) {
    return kept[runId] || (kept[runId] = { scalars: {}, [`scalars@${OVERVIEW}`]: {}, vectors: {} });
  }

  // Where series of ``points`` are kept (the static site has one resolution).
  const shelf = (kind, points) => (kind === "scalars" && points && !G.STATIC ? `scalars@${points}` : kind);

  function loadScript(src) {
    return new Promise((resolve, reject) => {
      const script = G.el("script", { src });
      script.onload = resolve;
      script.onerror = () => reject(new Error(`could not load ${src}`));
      document.body.appendChild(script);
    });
  }

  const scripts = {};  // src -> promise: each script loads once
  function loadOnce(src) { return scripts[src] || (scripts[src] = loadScript(src)); }

  async function fetchLive(runId, kind, keys, points) {
    const params = new URLSearchParams({ id: runId });
    if (points) params.set("points", String(points));
    for (const key of keys) params.append("key", key);
    const response = await fetch(`/api/${kind === "scalars" ? "series" : "vectors"}?${params}`, { cache: "no-store" });
    if (!response.ok) throw new Error(`${response.status} ${await response.text()}`);
    return response.json();
  }

  async function fetchStatic(runId, kind, keys) {
    const indexFile = indexFiles[runId];
    if (!indexFile) return {};
    await loadOnce(indexFile);
    const index = (window.GLASSLAB_SERIES_INDEX || {})[runId];
    if (!index) return {};
    const files = [...new Set(keys.map((k) => index[kind][k]).filter((n) => n != null))]
      .map((n) => `${index.prefix}-${n}.js`);
    await Promise.all(files.map(loadOnce));
    const out = {};
    for (const file of files) Object.assign(out, ((window.GLASSLAB_CHUNKS || {})[file] || {})[kind] || {});
    return out;
  }

  /* ``{key: data}`` for the ``keys`` of run ``runId`` it logged (``kind``: "scalars" | "vectors";
   * ``points``: OVERVIEW for an overview of each series); what is kept answers at once, the rest in
   * batches. */
  async function get(runId, kind, keys, points) {
    const where = shelf(kind, points);
    const mine = store(runId)[where];
    const tag = (k) => `${runId}\n${where}\n${k}`;
    const missing = [...new Set(keys)].filter((k) => !(k in mine) && !asked[tag(k)]);
    for (let i = 0; i < missing.length; i += BATCH) {
      const batch = missing.slice(i, i + BATCH);
      const promise = (G.STATIC ? fetchStatic(runId, kind, batch) : fetchLive(runId, kind, batch, points)).then((got) => {
        for (const key of batch) {
          // A key asked for and not logged is kept as absent, so it is not asked for again.
          if (!(key in mine)) mine[key] = got[key] || null;
          delete asked[tag(key)];
        }
      }, (err) => {
        for (const key of batch) delete asked[tag(key)];
        throw err;
      });
      for (const key of batch) asked[tag(key)] = promise;
    }
    await Promise.all([...new Set(keys.map((k) => asked[tag(k)]).filter(Boolean))]);
    const out = {};
    for (const key of keys) if (mine[key]) out[key] = mine[key];
    return out;
  }

  // A live point folded into what is kept, at each resolution (a re-logged step replaces its value).
  function addScalar(runId, key, step, value) {
    let found = false;
    for (const where of ["scalars", `scalars@${OVERVIEW}`]) {
      const s = store(runId)[where][key];
      if (!s) continue;
      window.GlasslabCharts.upsert({ xs: s.steps, ys: s.values, lo: s.min, hi: s.max }, step, value, value, value);
      found = true;
    }
    return found;
  }

  function addVector(runId, key, step, values) {
    const v = store(runId).vectors[key];
    if (!v) return false;
    const i = v.steps.indexOf(step);
    if (i >= 0) v.values[i] = values;
    else if (!v.steps.length || step > v.steps[v.steps.length - 1]) { v.steps.push(step); v.values.push(values); }
    return true;
  }

  G.source = {
    OVERVIEW,
    scalars: (runId, keys, points) => get(runId, "scalars", keys, points),
    vectors: (runId, keys) => get(runId, "vectors", keys),
    kept: (runId, kind, key, points) => store(runId)[shelf(kind, points)][key] || null,
    // Whether ``key`` was read at that resolution (a key the run never logged reads as absent: true).
    has: (runId, kind, key, points) => key in store(runId)[shelf(kind, points)],
    useIndex(runId, file) { if (file) indexFiles[runId] = file; },
    loadOnce,  // a static site's data script, loaded once (the batch panel's files too)
    // A page drawn again from fresh data (a new metric appeared) reads the series again.
    forget(runId) { delete kept[runId]; },
    addScalar, addVector,
  };
})();
