/* glasslab observatory: draw the page from its data with the page's module (page-*.js), then follow
 * it live. A page module is ``GlasslabPages[page] = (data, ctx) => handler`` where the handler may
 * take ``delta(runId, delta)`` (rows a run logged) and ``lab()`` (files under the lab changed). */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, app } = G;
  let handler = null;

  // Re-fetch and redraw the whole page at most once a second (overview, data: files changed).
  let refreshTimer = null;
  function scheduleRefresh() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(async () => {
      refreshTimer = null;
      try { draw(await G.loadData(), false); } catch (err) { /* keep the page as it is */ }
    }, 1000);
  }
  G.scheduleRefresh = scheduleRefresh;

  // ``data-ready`` goes on the body once the page is drawn (a page may finish drawing later: it
  // returns ``ready``, a promise), so tests and screenshots know when to look.
  async function draw(data, first) {
    app.textContent = "";
    for (const key of Object.keys(G.charts)) delete G.charts[key];
    document.title = `${data.title} · glasslab observatory`;
    handler = window.GlasslabPages[data.page](data) || {};
    if (first) {
      G.following = G.follow(data, {
        delta: (id, x) => handler.delta && handler.delta(id, x),
        lab: () => handler.lab && handler.lab(),
      }, () => (handler.query ? handler.query() : G.BOOT.query || {}));
    }
    if (handler.ready) await handler.ready;
    document.body.dataset.ready = "1";
  }
  G.draw = draw;

  G.nav();
  G.loadData().then((data) => {
    G.timing.data = performance.now();
    return draw(data, true);
  }).catch((err) => {
    app.textContent = "";
    app.append(el("h1", {}, "Could not load this page"), el("pre", {}, String(err)));
    document.body.dataset.ready = "1";
  });
})();
