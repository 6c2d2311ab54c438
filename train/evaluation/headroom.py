"""Headroom: whether routing can beat always-the-best-single-model on this data at all (see ``evaluate``)."""

from __future__ import annotations

from typing import TYPE_CHECKING


import numpy as np


from .baselines import (
    PairwiseSwitchRouter,
    Router,
    Split,
)
from .metrics import (
    Bootstrap,
    per_query,
)

if TYPE_CHECKING:
    from .evaluate import ProteusRouter

HEADROOM_BASELINES: tuple[str, ...] = ("MLP", "CARROT-Quality")


def headroom(
    proteus: ProteusRouter, baselines: dict[str, Router], val: Split, test: Split, boot: Bootstrap, margin: float,
    switch: PairwiseSwitchRouter | None = None,
) -> dict:
    """Can routing beat always-the-best-single-model here, and can the declared range honestly say so?

    Quality-seeking routings -- PROTEUS at mu = 1 (argmax p + b), PROTEUS at the top of its declared
    range, and the baselines that route to the highest predicted accuracy (``HEADROOM_BASELINES``;
    their predictors are early-stopped on validation, so their validation figures lean optimistic) --
    are scored on validation against validation's best single model, and on test against test's with
    a paired bootstrap CI of the per-query difference.  PROTEUS's declared top is its calibrated
    ceiling minus ``margin``; it can only pass the best single model where a routing's validation
    gain exceeds the margin.  Given the Pairwise-Switch probe (``switch``), it is scored too and
    ``pairwise_switch`` says on how many validation queries any model is expected to beat the anchor."""
    models, top = proteus.manifest.models, proteus.manifest.tau_range[1]
    choices = {
        "PROTEUS (mu = 1)": lambda s: proteus.quality_choice(s.emb, s.costs),
        "PROTEUS (top of range)": lambda s: proteus.route_split(s, top).assign,
        **{name: (lambda s, r=baselines[name]: r.route_split(s).assign) for name in HEADROOM_BASELINES if name in baselines},
    }
    if switch is not None:
        choices[switch.name] = lambda s: switch.route_split(s).assign
    best = {name: int(np.argmax(s.scores.mean(axis=0))) for name, s in (("val", val), ("test", test))}
    rows = {}
    for name, choose in choices.items():
        val_correct, test_correct = per_query(choose(val), val.scores), per_query(choose(test), test.scores)
        gain_test = test_correct - test.scores[:, best["test"]]
        low, high = boot.interval(gain_test)
        rows[name] = {
            "val_accuracy": float(val_correct.mean()),
            "val_gain_pp": float((val_correct.mean() - val.scores[:, best["val"]].mean()) * 100),
            "test_accuracy": float(test_correct.mean()),
            "test_gain_pp": float(gain_test.mean() * 100),
            "test_gain_ci_pp": [float(low) * 100, float(high) * 100],
        }
    max_gain = max(r["val_gain_pp"] for r in rows.values())
    out = {
        "best_single_val": {"model": models[best["val"]], "accuracy": float(val.scores[:, best["val"]].mean())},
        "best_single_test": {"model": models[best["test"]], "accuracy": float(test.scores[:, best["test"]].mean())},
        "oracle_val": float(val.scores.max(axis=1).mean()),
        "calibration_margin": margin,
        "routers": rows,
        "max_val_gain_pp": max_gain,
        "val_gain_exceeds_margin": bool(max_gain > margin * 100),
    }
    if switch is not None:
        win = switch.predictor.win_probability(val.emb).max(axis=1)
        out["pairwise_switch"] = {
            "anchor": models[switch.predictor.anchor],
            "val_switch_share": float(np.mean(win > 0.5)),
            "val_max_win_probability": float(win.max()),
        }
    return out
