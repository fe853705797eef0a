"""Mixtures: which domain weights are in force at a step, and the tokens and epochs they realise.

Weights are normalised over domains. A phase replaces the weights from its ``start_step`` on. An
epoch cap bounds how many passes over a domain's training tokens a run may take; once a domain hits
its cap it drops out and the remaining domains share its weight in proportion to theirs. The loader
draws domains with these rules; :func:`plan_mixture` computes the same thing up front in expectation,
so the report can say how many tokens and epochs each domain will get for a token budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from glasslab.data.config import MixtureConfig
from glasslab.errors import UserError


def check_mixture(mixture: MixtureConfig, domains: Iterable[str], where: str = "data.mixture") -> None:
    """One-line error for an empty mixture or one naming a domain the dataset does not have."""
    known = sorted(domains)
    sets = mixture.weight_sets()
    if not sets and not mixture.clusters:
        raise UserError(
            f"{where}.weights: empty mixture; give a weight per domain (domains: {', '.join(known)})"
        )
    for domain in sorted(mixture.domains()):
        if domain not in known:
            raise UserError(f"{where}: unknown domain {domain!r} (dataset domains: {', '.join(known)})")
    for start, weights in sets:
        if sum(weights.values()) <= 0:
            raise UserError(f"{where}: weights in force from step {start} are all zero ({dict(weights)})")


def normalized(weights: Mapping[str, float]) -> dict[str, float]:
    """Weights scaled to sum to one (zero weights kept as zero)."""
    total = sum(weights.values())
    return {d: w / total for d, w in sorted(weights.items())} if total > 0 else {}


def weights_at(mixture: MixtureConfig, step: int) -> dict[str, float]:
    """Normalised weights in force at optimiser step ``step`` (before any epoch cap takes a domain out)."""
    current: dict[str, float] = {}
    for start, weights in mixture.weight_sets():
        if start <= step or not current:
            current = weights
    return normalized(current)


def token_caps(mixture: MixtureConfig, domain_tokens: Mapping[str, int]) -> dict[str, float]:
    """Most training tokens each domain may give (inf when uncapped)."""
    return {d: mixture.epoch_caps.get(d, float("inf")) * n for d, n in domain_tokens.items()}


def _fill(demand: float, weights: dict[str, float], room: dict[str, float]) -> dict[str, float]:
    """Split ``demand`` tokens by ``weights`` within ``room``; a full domain passes on its share."""
    taken = dict.fromkeys(weights, 0.0)
    active = {d for d, w in weights.items() if w > 0 and room[d] > 0}
    while demand > 1e-9 and active:
        total = sum(weights[d] for d in active)
        share = {d: demand * weights[d] / total for d in active}
        full = {d for d in active if share[d] >= room[d] - taken[d]}
        if not full:
            for d in active:
                taken[d] += share[d]
            break
        for d in full:
            demand -= room[d] - taken[d]
            taken[d] = room[d]
        active -= full
    return taken


def plan_mixture(
    mixture: MixtureConfig, domain_tokens: Mapping[str, int], token_budget: int, tokens_per_step: int
) -> dict:
    """Tokens and epochs per domain and phase for a run of ``token_budget`` tokens (expected values).

    ``domain_tokens`` are each domain's training tokens; ``tokens_per_step`` converts a phase's
    ``start_step`` to tokens. Returns ``{"token_budget", "tokens_per_step", "phases": [{"start_step",
    "weights", "tokens", "epochs"}], "total": {"tokens", "epochs"}, "shortfall"}`` where a phase's
    ``epochs`` are passes over each domain taken during that phase and ``shortfall`` is budget no
    domain could serve within its cap.
    """
    check_mixture(mixture, domain_tokens)
    caps = token_caps(mixture, domain_tokens)
    used = dict.fromkeys(domain_tokens, 0.0)
    sets = mixture.weight_sets()
    phases, shortfall = [], 0.0
    for i, (start, weights) in enumerate(sets):
        begin = start * tokens_per_step if i else 0
        end = sets[i + 1][0] * tokens_per_step if i + 1 < len(sets) else token_budget
        demand = max(0.0, min(end, token_budget) - begin)
        full_weights = {d: normalized(weights).get(d, 0.0) for d in domain_tokens}
        taken = _fill(demand, full_weights, {d: caps[d] - used[d] for d in domain_tokens})
        shortfall += demand - sum(taken.values())
        for d, t in taken.items():
            used[d] += t
        phases.append(
            {
                "start_step": start,
                "weights": full_weights,
                "tokens": {d: round(t) for d, t in taken.items()},
                "epochs": {d: (t / domain_tokens[d] if domain_tokens[d] else 0.0) for d, t in taken.items()},
            }
        )
    return {
        "token_budget": token_budget,
        "tokens_per_step": tokens_per_step,
        "phases": phases,
        "total": {
            "tokens": {d: round(t) for d, t in used.items()},
            "epochs": {d: (t / domain_tokens[d] if domain_tokens[d] else 0.0) for d, t in used.items()},
        },
        "shortfall": round(shortfall),
    }
