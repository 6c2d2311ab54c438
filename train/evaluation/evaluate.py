"""The whole evaluation as one function of (artifact, splits with embeddings) -> metrics.

``evaluate`` never touches files or the encoder; ``inputs.py`` prepares its arguments and
``cli.py`` writes what it returns.  Choices where the paper and the issue are silent:

- Test rows with an unobserved outcome (NaN) for any model are left out of validation and test
  (the oracle, the limit and every router's accuracy need all outcomes); the count is reported as
  ``n_test_excluded``.  Train rows keep them (the predictors mask unobserved cells).
- Costs are each test row's logged per-call costs (missing ones filled with the model's mean), the
  same numbers for every router; cost_per_1k = mean cost x 1000.
- The single-number ``routers`` row of a tau-capable router (PROTEUS, Calibrated-Threshold,
  OmniRouter-Style) is its routing at the *headline tau* = the middle of the artifact's tau_range
  (``--headline-tau`` overrides); every tau is in ``per_tau`` / ``baselines_per_tau``.
- Router latency (for RE and RPI) is measured in this run: encoder forward time per query at batch
  ``latency_batch`` (given by the caller, measured on real test prompts without the embedding
  cache) plus the router's own decision time per query at the same batch size, timed over the
  test embeddings.  Static rules (Random, Cheapest, BestFixed) have zero latency: RE is N/A for
  them, as in the paper.  RPI takes t_LLM = ``llm_latency_s`` (default 2 s, the low end of the
  paper's "2-7 s") and Cost_max = the cost of always routing to the most expensive model.
- tau-mu correlation: Pearson correlation between the tau grid and PROTEUS's mean mu at each tau
  (``tau_mu_corr``); the per-query pooled correlation is also reported (``tau_mu_corr_pooled``).
- A tau-capable baseline tuned on validation (Calibrated-Threshold, OmniRouter-Style) serves a tau
  beyond what its validation supports with its most accurate setting; ``baselines_validated_top``
  gives that limit and each ``baselines_per_tau`` row says whether its tau is within it
  (``validated``): PROTEUS would not declare such a tau.
- Headroom (``headroom``): whether routing can beat always-the-best-single-model on this data at all.
  Quality-seeking routings are scored on validation against validation's best single model and on
  test against test's (paired bootstrap CI of the per-query difference); the declared range can only
  honestly pass the best single model where the validation gain exceeds the calibration margin.
  Besides PROTEUS and the paper's quality-seeking baselines, a probe that is not a paper baseline
  (Pairwise-Switch: per model, a classifier of who is right where it and the best single model
  disagree) scores the most direct switching rule there is.
- PROTEUS routes each test query with its prompt's mixing draw (``predictor.mixing_draw``), so an
  artifact with a cost frontier mixes operating points exactly as the proxy does; the CLI adds the
  same artifact without mixing as the ablation row ``No-Mixing``, and ``baselines_mixed_per_tau``
  scores Calibrated-Threshold and OmniRouter-Style given the same mixing over their validation cost
  frontiers (a probe: how much of PROTEUS's cost edge mixing alone would give them).
- Tiers split tau_range into three equal parts (Economy, Standard, Premium); a tier's accuracy and
  cost are the means over 5 evenly spaced taus in it; ``margin_pp`` = accuracy - the tier's middle
  tau (the paper's "margin"), ``worst_margin_pp`` = the smallest accuracy - tau inside the tier.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from litellm_proteus.artifact import Manifest
from litellm_proteus.model import ProteusModel

from ..routing import route_log
from . import dynamic as dyn
from .baselines import (
    FitContext,
    FixedRouter,
    KnobRouter,
    MixedKnobRouter,
    PairwiseSwitchRouter,
    Assignment,
    Router,
    Split,
    fit_baselines,
)
from .limit import limit_curve
from .metrics import (
    Bootstrap,
    oracle_choice,
    per_query,
    routing_efficiency,
    routing_performance_index,
)

PROTEUS = "PROTEUS"
from .headroom import headroom
from .tau_sweep import adaptability, max_compliant_tau, sweep, tiers


@dataclass
class EvalConfig:
    seeds: int = 5  # dynamic-scenario seeds
    seed: int = 0  # baselines' training seed and the bootstrap's seed
    tau_step: float = 0.01
    bootstrap: int = 1000
    llm_latency_s: float = 2.0
    latency_batch: int = 8
    latency_queries: int = 256
    dynamic_queries: int = 1000
    dynamic_window: int = 100
    headline_tau: float | None = None
    compliance_grid_below_best: float = 0.10


@dataclass
class EvalResult:
    metrics: dict
    plots: dict = field(default_factory=dict)  # arrays the figures need (not in metrics.json)


class ProteusRouter(Router):
    name = PROTEUS
    tau_capable = True
    per_query_tau = True

    def __init__(self, model: ProteusModel, manifest: Manifest, name: str = PROTEUS, mix: bool = True):
        """``mix``: hand route_log the split's prompt draws, as the proxy does (mix_operating_points)."""
        self.model, self.manifest, self.mix = model, manifest, mix
        self.name = name  # type: ignore[misc]

    def route(self, emb, costs, tau=None, draws=None) -> Assignment:
        if tau is None:
            raise ValueError("PROTEUS needs tau")
        out = route_log(self.model, self.manifest, emb, costs, tau, draws=draws)
        return Assignment(out.choice, mu=out.mu)

    def route_split(self, split: Split, tau=None) -> Assignment:
        return self.route(split.emb, split.costs, tau, draws=split.draws if self.mix else None)

    def quality_choice(self, emb: np.ndarray, costs: np.ndarray) -> np.ndarray:
        """Routing at mu = 1, where eq. 2 loses its cost term: argmax_i p_i(x) + b_i."""
        # p_i(x) does not depend on tau: any tau in range gives it
        p = route_log(self.model, self.manifest, emb, costs, self.manifest.tau_range[1]).p
        return (p + self.model.boost.detach().cpu().numpy()).argmax(axis=1)


def tau_grid(lo: float, hi: float, step: float) -> np.ndarray:
    """lo, lo + step, ... up to hi (hi itself always included)."""
    if step <= 0:
        raise ValueError(f"tau step must be > 0; got {step}")
    grid = np.round(np.arange(lo, hi + 1e-9, step), 6)
    if grid.size == 0 or grid[-1] < hi - 1e-9:
        grid = np.r_[grid, round(hi, 6)]
    return grid


def head_latency_ms(router: Router, test: Split, tau: float | None, batch: int, max_queries: int) -> float:
    """Mean decision time per query (ms) when routing the test embeddings in batches of ``batch``."""
    n = max(min(len(test), max_queries), 1)
    batches = [test.take(slice(s, s + batch)) for s in range(0, n, batch)]
    router.route_split(batches[0], tau)  # warm-up (allocations, lazy init)
    start = time.perf_counter()
    for rows in batches:
        router.route_split(rows, tau)
    return (time.perf_counter() - start) * 1000.0 / n




def _router_row(
    routed: Assignment, test: Split, boot: Bootstrap, oracle_acc: float, random_acc: float, cost_max: float,
    latency_ms: float, config: EvalConfig,
) -> dict:
    correct = per_query(routed.assign, test.scores)
    cost = per_query(routed.assign, test.costs)
    acc, cost_1k = float(correct.mean()), float(cost.mean() * 1000)
    (acc_lo, acc_hi), (c_lo, c_hi) = boot.interval(correct), boot.interval(cost)
    return {
        "accuracy": acc,
        "cost_per_1k": cost_1k,
        "oracle_gap_pp": (oracle_acc - acc) * 100,
        "re": routing_efficiency(acc, random_acc, latency_ms),
        "rpi": routing_performance_index(acc, oracle_acc, cost_1k, cost_max, latency_ms, config.llm_latency_s),
        "latency_ms": latency_ms,
        "accuracy_ci_low": float(acc_lo),
        "accuracy_ci_high": float(acc_hi),
        "cost_ci_low": float(c_lo) * 1000,
        "cost_ci_high": float(c_hi) * 1000,
    }


def evaluate(
    model: ProteusModel,
    manifest: Manifest,
    train: Split,
    val: Split,
    test: Split,
    *,
    config: EvalConfig | None = None,
    encoder_ms: float = 0.0,
    dataset: str = "",
    ablations: dict[str, tuple[ProteusRouter, np.ndarray]] | None = None,
    extra: dict | None = None,
    progress=None,
) -> EvalResult:
    """Evaluate PROTEUS, every baseline, the oracle and the limit on ``test``.

    ``ablations``: name -> (router of the ablated artifact, its test embeddings).
    ``progress``: optional callable(str) for status lines."""
    config = config or EvalConfig()
    say = progress or (lambda _msg: None)
    if len(test) < 2:
        raise ValueError("the test split needs at least 2 fully observed rows")
    k = test.n_models
    lo, hi = manifest.tau_range
    headline = float(config.headline_tau) if config.headline_tau is not None else round((lo + hi) / 2, 6)
    grid = tau_grid(lo, hi, config.tau_step)
    boot = Bootstrap(len(test), config.bootstrap, seed=config.seed)

    # oracle, best single model, limit
    o_choice = oracle_choice(test.scores, test.costs)
    oracle_acc = float(per_query(o_choice, test.scores).mean())
    oracle_cost = float(per_query(o_choice, test.costs).mean() * 1000)
    model_acc = test.scores.mean(axis=0)
    model_cost = test.costs.mean(axis=0) * 1000
    cost_max = float(model_cost.max())
    random_acc = float(model_acc.mean())
    limit = limit_curve(test.scores, test.costs)

    # routers
    proteus = ProteusRouter(model, manifest)
    say("fitting baselines on the train split (tuning on validation)")
    t0 = time.perf_counter()
    ctx = FitContext(train, val, seed=config.seed, margin=float(manifest.calibration.margin))
    routers: list[Router] = [proteus, *fit_baselines(ctx)]
    fit_s = time.perf_counter() - t0

    say("measuring router latency and routing at the headline tau")
    rows, head_ms = {}, {}
    for router in routers:
        tau = headline if router.tau_capable else None
        head_ms[router.name] = (
            head_latency_ms(router, test, tau, config.latency_batch, config.latency_queries) if router.has_latency else 0.0
        )
        latency = encoder_ms + head_ms[router.name] if router.has_latency else 0.0
        routed = router.route_split(test, tau)
        row = _router_row(routed, test, boot, oracle_acc, random_acc, cost_max, latency, config)
        if router.tau_capable:
            row["tau"] = headline
        if isinstance(router, FixedRouter):
            row["model"] = manifest.models[router.model_index]
        row.update(router.details())
        rows[router.name] = row

    say("sweeping tau (PROTEUS and the tau-capable baselines)")
    curves = {r.name: sweep(r, test, grid) for r in routers if r.tau_capable}
    per_tau = curves[PROTEUS].rows(boot, limit)
    baselines_per_tau = {name: c.rows(boot, limit) for name, c in curves.items() if name != PROTEUS}
    validated_top = {r.name: r.validated_top() for r in routers if r.tau_capable and r.name != PROTEUS}
    for name, rows_ in baselines_per_tau.items():
        for row in rows_:
            row["validated"] = validated_top[name] is None or row["tau"] <= validated_top[name] + 1e-9
    # the tau-capable baselines given PROTEUS's operating-point mixing (a probe, not paper baselines)
    baselines_mixed_per_tau = {}
    if test.draws is not None:
        for router in routers:
            if isinstance(router, KnobRouter) and router.table.frontier is not None:
                baselines_mixed_per_tau[router.name] = sweep(MixedKnobRouter(router), test, grid).rows(boot, limit)
                for row in baselines_mixed_per_tau[router.name]:
                    row["validated"] = row["tau"] <= validated_top[router.name] + 1e-9
    adapt = adaptability(curves[PROTEUS])
    adapt["floor_compliance_ci_low"] = float(np.mean([r["meets_floor_ci_low"] for r in per_tau]))

    # where each tau-capable router stops keeping its promise, on a standard grid
    best_idx = int(np.argmax(model_acc))
    c_lo = np.ceil((model_acc[best_idx] - config.compliance_grid_below_best) * 100 - 1e-6) / 100
    c_hi = np.floor(oracle_acc * 100 + 1e-6) / 100
    compliance_grid = tau_grid(c_lo, c_hi, 0.01) if c_hi >= c_lo else np.asarray([])
    compliance = {}
    for router in routers:
        if router.tau_capable and compliance_grid.size:
            value, first_miss = max_compliant_tau(sweep(router, test, compliance_grid))
            compliance[router.name] = {"max_compliant_tau": value, "first_miss": first_miss}

    room = headroom(
        proteus, {r.name: r for r in routers}, val, test, boot, float(manifest.calibration.margin),
        switch=PairwiseSwitchRouter().fit(ctx),
    )

    say("tiers, dynamic scenarios and the limit")
    tier_rows = tiers(proteus, test, (lo, hi))
    dynamic, dynamic_baselines, traces = {}, {}, {}
    for router in routers:
        if not router.per_query_tau:
            continue
        for scenario in dyn.SCENARIOS:
            summary, trace = dyn.run_scenario(
                router, test, scenario, (lo, hi), n_queries=config.dynamic_queries, seeds=config.seeds,
                window=config.dynamic_window, base_seed=config.seed,
            )
            traces.setdefault(router.name, {})[scenario] = trace
            if router.name == PROTEUS:
                dynamic[scenario] = summary
            else:
                dynamic_baselines.setdefault(router.name, {})[scenario] = summary

    limit_rows = [{"tau": float(t), "cost_per_1k": limit.cost_per_1k(float(t))} for t in grid]

    ablation_rows = {}
    if ablations:
        say(f"ablations: {', '.join(ablations)}")
        full = rows[PROTEUS]
        full_curve = curves[PROTEUS]
        full_correct = per_query(proteus.route_split(test, headline).assign, test.scores)
        for name, (router, emb) in ablations.items():
            test_a = Split(emb, test.scores, test.costs, test.draws)
            routed = router.route_split(test_a, headline)
            correct = per_query(routed.assign, test.scores)
            acc = float(correct.mean())
            cost = float(per_query(routed.assign, test.costs).mean() * 1000)
            delta_lo, delta_hi = boot.interval(correct - full_correct)  # paired bootstrap
            curve = sweep(router, test_a, grid)
            ad = adaptability(curve)
            ablation_rows[name] = {
                "accuracy": acc,
                "cost_per_1k": cost,
                "delta_accuracy_pp": (acc - full["accuracy"]) * 100,
                "delta_accuracy_ci_pp": [float(delta_lo) * 100, float(delta_hi) * 100],
                "delta_cost_pct": (cost / full["cost_per_1k"] - 1) * 100 if full["cost_per_1k"] > 0 else None,
                "mean_accuracy_over_grid": float(curve.accuracy.mean()),
                "mean_cost_per_1k_over_grid": float(curve.cost_per_1k.mean()),
                "delta_mean_accuracy_pp": float((curve.accuracy.mean() - full_curve.accuracy.mean()) * 100),
                "delta_mean_cost_pct": float((curve.cost_per_1k.mean() / full_curve.cost_per_1k.mean() - 1) * 100),
                "floor_compliance": ad["floor_compliance"],
                "tau_mu_corr": ad["tau_mu_corr"],
            }

    best_single = {"model": manifest.models[best_idx], "accuracy": float(model_acc[best_idx]), "cost_per_1k": float(model_cost[best_idx])}
    width = hi - lo
    metrics = {
        "dataset": dataset,
        "n_train": len(train),
        "n_val": len(val),
        "n_test": len(test),
        "models": list(manifest.models),
        "tau_range": [lo, hi],
        "headline_tau": headline,
        "oracle": {"accuracy": oracle_acc, "cost_per_1k": oracle_cost},
        "limit_at_proteus_accuracy": limit.cost_per_1k(rows[PROTEUS]["accuracy"]),
        "best_single_test": best_single,
        "per_model_test": {
            m: {"accuracy": float(a), "cost_per_1k": float(c)} for m, a, c in zip(manifest.models, model_acc, model_cost)
        },
        "routers": rows,
        "adaptability": adapt,
        "per_tau": per_tau,
        "headroom": room,
        "max_compliant_tau": compliance.get(PROTEUS, {}).get("max_compliant_tau"),
        "max_compliant_tau_detail": {
            "grid": [float(compliance_grid[0]), float(compliance_grid[-1])] if compliance_grid.size else None,
            "step": 0.01,
            "routers": compliance,
        },
        "baselines_per_tau": baselines_per_tau,
        "baselines_mixed_per_tau": baselines_mixed_per_tau,
        "baselines_validated_top": validated_top,
        "tiers": tier_rows,
        "dynamic": dynamic,
        "dynamic_baselines": dynamic_baselines,
        "limit": limit_rows,
        "ablations": ablation_rows,
        "latency": {
            "encoder_ms_per_query": encoder_ms,
            "batch_size": config.latency_batch,
            "router_head_ms_per_query": head_ms,
            "llm_latency_s": config.llm_latency_s,
        },
        "acceptance": {
            "floor_compliance_is_1": adapt["floor_compliance"] >= 1.0 - 1e-12,
            "tau_mu_corr_ge_0_9": adapt["tau_mu_corr"] is not None and adapt["tau_mu_corr"] >= 0.9,
            "tau_range_width": width,
            "tau_range_width_ge_0_05": width >= 0.05 - 1e-9,
            "tau_hi_above_best_single_test": hi > best_single["accuracy"],
        },
        "settings": {
            "seeds": config.seeds,
            "seed": config.seed,
            "bootstrap_resamples": config.bootstrap,
            "tau_step": config.tau_step,
            "dynamic_queries": config.dynamic_queries,
            "dynamic_window": config.dynamic_window,
            "baseline_fit_s": round(fit_s, 2),
            "calibration_margin": float(manifest.calibration.margin),
            "k": k,
        },
    }
    if extra:
        metrics.update(extra)
    plots = {
        "curves": {name: {"tau": c.taus, "accuracy": c.accuracy, "cost_per_1k": c.cost_per_1k} for name, c in curves.items()},
        "dynamic_traces": traces,
        "limit": limit,
    }
    return EvalResult(metrics=metrics, plots=plots)
