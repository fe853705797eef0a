"""The model card of an export: ``README.md`` in the Hugging Face layout (YAML front matter, then prose).

The card says what the model is and where it came from, from facts the exporting step gathered out of
the run's files — nothing here reads a file, so the card is a pure function of those facts:

- ``run``, ``step``: the run id (its folder name) and the checkpoint exported;
- ``architecture``, ``size_name``, ``param_counts`` (total/active, embedding/non-embedding), ``model``
  (the model config as plain data);
- ``data``: ``dataset`` (folder name), ``manifest_hash``, ``sources`` (name, domain, kind, provenance,
  licence) and ``weights`` (domain → mixture weight at the start of training);
- ``training``: ``steps``, ``tokens``, ``flops`` (training FLOPs = tokens × FLOPs per token), ``seq_len``,
  ``global_batch_tokens``, ``device``, ``world_size``;
- ``evals``: ``step`` (when they were taken), ``metrics`` (``eval/<domain>/loss`` in nats per token,
  ``eval/<domain>/bpb`` in bits per byte, ``eval/task/<task>/acc|acc_norm|bpb``) and ``tasks`` (task →
  ``items``, ``chance``, ``metric``, ``sha256``: what the run's ``run.json`` says of its downstream tasks);
- ``page_url``: the run's page in the observatory; ``max_logit_diff``, ``logit_check``,
  ``glasslab_version`` from the manifest.
"""

from __future__ import annotations

from typing import Any

import yaml

USAGE = '''from transformers import AutoModelForCausalLM, AutoTokenizer
tok, model = AutoTokenizer.from_pretrained("{path}"), AutoModelForCausalLM.from_pretrained("{path}")
print(tok.decode(model.generate(**tok("def ", return_tensors="pt"), max_new_tokens=40, do_sample=True)[0]))'''
"""The three lines that load an export and sample from it (the README shows the same)."""


def model_card(facts: dict[str, Any]) -> str:
    """The card for an export described by ``facts`` (see the module docstring) as Markdown text."""
    run, step = facts["run"], facts["step"]
    moe = (facts.get("model") or {}).get("moe")
    evals = facts.get("evals") or {}
    parts = [
        _front_matter(facts, moe is not None),
        f"# {run} (step {step})",
        f"A {facts['size_name']} {'mixture-of-experts' if moe else 'dense'} decoder-only language model trained "
        f"from scratch with glasslab {facts.get('glasslab_version', '')}, "
        f"exported as `{facts['architecture']}` so `transformers` loads it with no custom code. "
        "It is a small research model from an open lab, not an assistant: expect plausible-looking text, "
        "not facts.",
        f"Its training run, with every curve, incident and sample: {facts['page_url']}" if facts.get("page_url")
        else "",
        "## Use",
        "```python\n" + USAGE.format(path="PATH/TO/THIS/FOLDER") + "\n```",
        "## Architecture",
        _architecture(facts),
        "## Training data",
        _data(facts.get("data") or {}),
        "## Training",
        _training(facts.get("training") or {}),
        "## Evaluation",
        _evals(evals),
        "## Export check",
        _check(facts.get("max_logit_diff"), facts.get("logit_check")),
    ]
    return "\n\n".join(p for p in parts if p) + "\n"


def _front_matter(facts: dict[str, Any], is_moe: bool) -> str:
    meta: dict[str, Any] = {
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        "tags": ["glasslab", "mixture-of-experts" if is_moe else "dense", facts["architecture"]],
    }
    metrics = (facts.get("evals") or {}).get("metrics") or {}
    if metrics:
        dataset = (facts.get("data") or {}).get("dataset") or "held-out"
        meta["model-index"] = [{
            "name": facts["run"],
            "results": [{
                "task": {"type": "text-generation"},
                "dataset": {"name": f"{dataset} (held-out split)", "type": "glasslab"},
                "metrics": [{"name": key, "type": key.rsplit("/", 1)[-1], "value": round(float(value), 4)}
                            for key, value in sorted(metrics.items())],
            }],
        }]
    return "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---"


def _architecture(facts: dict[str, Any]) -> str:
    model = facts.get("model") or {}
    counts = facts.get("param_counts") or {}
    rows = [
        ("size name", facts["size_name"]),
        ("parameters", _count(counts.get("total"))),
        ("active parameters per token", _count(counts.get("active"))),
        ("layers × width", f"{model.get('n_layers')} × {model.get('d_model')}"),
        ("heads (query / key-value)", f"{model.get('n_heads')} / {model.get('n_kv_heads') or model.get('n_heads')}"),
        ("vocabulary", model.get("vocab_size")),
    ]
    moe = model.get("moe")
    if moe:
        rows += [
            ("experts", f"{moe['num_experts']} routed (top-{moe['top_k']}), {moe['num_shared_experts']} shared, "
                        f"width {moe['d_expert']}"),
            ("router", f"{moe['router']}, balancing {moe['balancing']}"),
        ]
    else:
        rows.append(("feed-forward width", model.get("d_ff")))
    return _table(("", "value"), rows)


def _data(data: dict[str, Any]) -> str:
    sources = data.get("sources") or []
    weights = data.get("weights") or {}
    lines = []
    if data.get("dataset"):
        lines.append(f"Dataset `{data['dataset']}` (manifest sha256 `{str(data.get('manifest_hash', ''))[:16]}`).")
    if sources:
        lines.append(_table(("source", "domain", "kind", "provenance", "licence"),
                            [(s.get("name"), s.get("domain"), s.get("kind"), s.get("provenance"), s.get("licence"))
                             for s in sources]))
    if weights:
        lines.append("Mixture weights: " + ", ".join(f"{d} {w:.3g}" for d, w in sorted(weights.items())) + ".")
    return "\n\n".join(lines) or "Not recorded."


def _training(training: dict[str, Any]) -> str:
    if not training:
        return "Not recorded."
    rows = [
        ("optimiser steps", training.get("steps")),
        ("tokens", _count(training.get("tokens"))),
        ("training compute", f"{training['flops']:.3g} FLOPs" if training.get("flops") else None),
        ("sequence length", training.get("seq_len")),
        ("tokens per step", training.get("global_batch_tokens")),
        ("device", f"{training.get('device')} × {training.get('world_size', 1)}"),
    ]
    return _table(("", "value"), [r for r in rows if r[1] is not None])


def _evals(evals: dict[str, Any]) -> str:
    metrics = evals.get("metrics") or {}
    if not metrics:
        return "No evaluation was recorded up to this step."
    tasks = evals.get("tasks") or {}
    task_rows = [(name, about.get("items"), _percent(about.get("chance")),
                  _percent(metrics.get(f"eval/task/{name}/acc")), _percent(metrics.get(f"eval/task/{name}/acc_norm")),
                  _number(metrics.get(f"eval/task/{name}/bpb")))
                 for name, about in sorted(tasks.items()) if f"eval/task/{name}/acc" in metrics]
    held_out = {k: v for k, v in metrics.items() if not (task_rows and k.startswith("eval/task/"))}
    parts = [f"On the dataset's held-out split, at step {evals.get('step')}: loss in nats per token over the "
             "held-out tokens outside text the training split holds too, bpb in bits per byte of text.",
             _table(("metric", "value"), [(k, f"{float(v):.4f}") for k, v in sorted(held_out.items())])]
    if task_rows:
        macro = metrics.get("eval/task/macro/acc")
        parts += ["Downstream tasks (multiple choice, scored by log-likelihood as lm-eval-harness does; built-in "
                  "tasks are made from held-out documents and decontaminated against the training shards)"
                  + (f", macro accuracy {_percent(macro)}" if macro is not None else "") + ":",
                  _table(("task", "items", "chance", "acc", "acc_norm", "bpb of the answer"), task_rows)]
    return "\n\n".join(parts)


def _percent(value: Any) -> str | None:
    return None if value is None else f"{100 * float(value):.1f}%"


def _number(value: Any) -> str | None:
    return None if value is None else f"{float(value):.4f}"


def _check(difference: float | None, check: dict[str, Any] | None) -> str:
    if difference is None or not check:
        return "The export's logits were not compared with glasslab's."
    return (f"Loaded back with `AutoModelForCausalLM` at export, its fp32 logits differed from glasslab's by at "
            f"most {difference:.2e} over {check['tokens']} held-out tokens "
            f"(largest |logit| {check['max_abs_logit']:.3g}).")


def _count(n: Any) -> str | None:
    if n is None:
        return None
    n = float(n)
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit} ({int(n):,})"
    return f"{int(n):,}"


def _table(header: tuple[str, ...], rows: list[tuple]) -> str:
    def cell(value: Any) -> str:
        return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
