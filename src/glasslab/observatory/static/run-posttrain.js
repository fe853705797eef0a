/* A post-training run's (SFT, DPO, RL) first section: what became of its data (conversations cut or left
 * out, pairs left out) and its base's numbers, measured before step 0, beside its own latest (read
 * from the series source as the charts are, kept current by the live deltas). Left out for any other
 * run. */
(function () {
  "use strict";
  const G = window.Glasslab;
  const { el, fmt, table } = G;
  const ROLES = { sft: "supervised fine-tuning", dpo: "preference tuning (DPO)",
                  rl: "RL with verifiable rewards (GRPO)" };
  const HEADLINE = { sft: "eval/sft/loss", dpo: "eval/dpo/pref_accuracy", rl: "eval/rl/pass_at_1" };

  function countsTable(rec) {
    if (rec.role === "sft" && rec.conversations) {
      const c = rec.conversations;
      return table(["conversations", "given", "whole", "cut at a turn boundary", "left out: longer than a row",
                    "left out: first reply longer than a row", "used"],
        ["train", "heldout"].filter((k) => c[k]).map((k) => [k === "train" ? "training" : "held out",
          c[k].conversations, c[k].whole, c[k].cut, c[k].left_out_long, c[k].left_out_first_reply, c[k].kept]),
        { class: "counts", units: [null, "count", "count", "count", "count", "count", "count"] });
    }
    if (rec.role === "dpo" && rec.pairs) {
      const p = rec.pairs;
      return table(["pairs", "given", "used", "left out: longer than a row"],
        ["train", "heldout"].filter((k) => p[k]).map((k) => [k === "train" ? "training" : "held out",
          p[k].pairs, p[k].kept, p[k].left_out_long]),
        { class: "counts", units: [null, "count", "count", "count"] });
    }
    if (rec.role === "rl" && rec.prompts) {
      const p = rec.prompts;
      return table(["prompts", "used"], ["train", "heldout"].filter((k) => p[k]).map((k) =>
        [k === "train" ? "training" : "held out", p[k].prompts]), { class: "counts", units: [null, "count"] });
    }
    return null;
  }

  // The base's metrics (measured before step 0 as the run's last evaluation is), the headline first.
  function beforeKeys(rec) {
    const headline = HEADLINE[rec.role];
    return Object.keys((rec.base || {}).metrics || {}).filter((k) => !k.endsWith("/bpb"))
      .sort((a, b) => (b === headline) - (a === headline) || a.localeCompare(b));
  }

  function beforeAfter(before, keys, now) {
    return table(["metric", "base (before step 0)", "now", "change"], keys.map((k) => {
      const value = now[k] ? now[k].value : null;
      return [k, before[k], value ?? "", value == null ? "" : fmt(value - before[k])];
    }), { class: "before-after" });
  }

  G.runSections.add({
    id: "posttrain", order: 5,
    title: (ctx) => `Post-training: ${ROLES[(ctx.d.record || {}).role]}`,
    draw(body, ctx) {
      const d = ctx.d, rec = d.record || {};
      if (!ROLES[rec.role]) return false;
      const counts = countsTable(rec);
      if (counts) body.append(counts);
      const before = (rec.base || {}).metrics || {};
      const keys = beforeKeys(rec), shown = new Set(keys);
      const now = {};  // key -> {step, value}: the run's latest
      const slot = el("div", {});
      const redraw = () => { slot.textContent = ""; slot.append(beforeAfter(before, keys, now)); };
      if (keys.length) { body.append(slot); redraw(); }
      if (rec.beta != null) body.append(el("p", { class: "muted" }, `β = ${rec.beta}; the reference is the base.`));
      if (rec.reward != null) {
        body.append(el("p", { class: "muted" }, `reward: ${rec.reward}; ${rec.group_size} answers per prompt; the KL ` +
                       "reference is the base."));
      }
      if (!keys.length) return counts || rec.beta != null || rec.reward != null ? null : false;
      // A downsampled point carries its bucket's last value, so an overview's last point is the latest.
      const ready = G.source.scalars(d.id, keys, G.source.OVERVIEW).then((series) => {
        for (const [k, s] of Object.entries(series)) {
          const n = s.steps.length;
          if (n && !(now[k] && now[k].step > s.steps[n - 1])) now[k] = { step: s.steps[n - 1], value: s.values[n - 1] };
        }
        redraw();
      }).catch(() => { /* the table stays without "now" */ });
      return {
        ready,
        delta(delta) {
          let changed = false;
          for (const [key, step, value] of delta.scalars) {
            if (!shown.has(key) || (now[key] && now[key].step > step)) continue;
            now[key] = { step, value };
            changed = true;
          }
          if (changed) redraw();
        },
      };
    },
  });
})();
