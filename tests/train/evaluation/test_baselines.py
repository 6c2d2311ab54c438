"""Each baseline on a tiny synthetic dataset (see conftest.synthetic) and on hand-made inputs."""

from __future__ import annotations

import numpy as np
import pytest

from proteus_train.evaluation.baselines import (
    BASELINE_NAMES,
    BestFixedRouter,
    CalibratedThresholdRouter,
    CarrotRouter,
    CheapestRouter,
    FitContext,
    KnobTable,
    KNNPredictor,
    KNNRouter,
    MixedKnobRouter,
    MLPRouter,
    OmniRouterRouter,
    PairwiseSwitchPredictor,
    PairwiseSwitchRouter,
    RandomRouter,
    RouteLLMRouter,
    Split,
    cheapest_argmax,
    make_baselines,
)
from proteus_train.evaluation.metrics import accuracy, cost_per_1k

from .conftest import SYNTH_MODELS


def acc_cost(router, split, tau=None):
    assign = router.route(split.emb, split.costs, tau).assign
    return accuracy(assign, split.scores), cost_per_1k(assign, split.costs)


def test_names_and_order():
    assert [r.name for r in make_baselines()] == list(BASELINE_NAMES)
    assert len(BASELINE_NAMES) == 13


def test_split_validates_its_arrays():
    with pytest.raises(ValueError, match="same number of rows"):
        Split(np.zeros((3, 4)), np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="finite"):
        Split(np.zeros((1, 4)), np.zeros((1, 2)), np.array([[1.0, np.nan]]))


def test_random_is_the_exact_expectation(synth_ctx, synth_splits):
    test = synth_splits[2]
    acc, cost = acc_cost(RandomRouter().fit(synth_ctx), test)
    assert acc == pytest.approx(test.scores.mean())
    assert cost == pytest.approx(test.costs.mean() * 1000)


def test_cheapest_and_best_fixed(synth_ctx, synth_splits):
    assert SYNTH_MODELS[CheapestRouter().fit(synth_ctx).model_index] == "tiny"
    assert SYNTH_MODELS[BestFixedRouter().fit(synth_ctx).model_index] == "huge"
    test = synth_splits[2]
    assert acc_cost(BestFixedRouter().fit(synth_ctx), test)[0] == pytest.approx(test.scores[:, 3].mean())


def test_cheapest_argmax_breaks_ties_towards_the_cheaper_model():
    pred = np.array([[0.6, 0.6, 0.2], [0.1, 0.4, 0.4]])
    costs = np.array([[3.0, 1.0, 0.5], [1.0, 5.0, 2.0]])
    assert cheapest_argmax(pred, costs).tolist() == [1, 2]


def test_knn_predicts_neighbour_means(synth_splits):
    train = synth_splits[0]
    # k = 1 on the train rows themselves returns each row's own outcomes
    assert np.array_equal(KNNPredictor(train, k=1).predict(train.emb), train.scores)
    # NaN cells are skipped; a model never observed among the neighbours falls back to its train mean
    emb = np.eye(3, dtype=np.float32)
    tiny = Split(emb, np.array([[1.0, np.nan], [0.0, np.nan], [1.0, 1.0]]), np.ones((3, 2)))
    pred = KNNPredictor(tiny, k=2).predict(np.array([[1.0, 0.9, 0.0]], dtype=np.float32))
    assert pred[0].tolist() == [0.5, 1.0]


def test_knn_router_beats_random_on_learnable_data(synth_ctx, synth_splits):
    test = synth_splits[2]
    knn_acc, _ = acc_cost(KNNRouter(5).fit(synth_ctx), test)
    assert knn_acc > acc_cost(CheapestRouter().fit(synth_ctx), test)[0]


def test_mlp_predictor_learns_the_outcomes(synth_ctx, synth_splits):
    test = synth_splits[2]
    p = synth_ctx.score_mlp().predict(test.emb)
    assert p.shape == test.scores.shape and np.all((p >= 0) & (p <= 1))
    # predicted p separates correct from wrong outcomes (pooled over models)
    assert p[test.scores == 1].mean() > p[test.scores == 0].mean() + 0.1
    acc, _ = acc_cost(MLPRouter().fit(synth_ctx), test)
    assert acc >= acc_cost(CheapestRouter().fit(synth_ctx), test)[0]


def test_carrot_trades_accuracy_for_cost_with_mu(synth_ctx, synth_splits):
    test = synth_splits[2]
    results = {name: acc_cost(CarrotRouter(name).fit(synth_ctx), test) for name in CarrotRouter.VARIANTS}
    q, b, c = results["CARROT-Quality"], results["CARROT-Balanced"], results["CARROT-Cost"]
    assert q[1] >= b[1] >= c[1]  # cost falls as mu grows
    assert q[0] >= c[0]
    with pytest.raises(ValueError, match="CARROT variant"):
        CarrotRouter("CARROT-Max")


def test_routellm_classifier(synth_ctx, synth_splits):
    test = synth_splits[2]
    router = RouteLLMRouter().fit(synth_ctx)
    probs = router.classifier.predict(test.emb)
    assert probs.shape == test.scores.shape
    assert np.allclose(probs.sum(axis=1), 1.0)
    choice = router.route(test.emb, test.costs).assign
    assert set(np.unique(choice)) <= set(range(len(SYNTH_MODELS)))


def test_knob_table_uses_the_lower_envelope():
    table = KnobTable(np.array([0.0, 0.5, 1.0]), np.array([0.6, 0.8, 0.7]))
    assert table.envelope.tolist() == [0.6, 0.7, 0.7]
    assert table.knob(0.55).tolist() == [0.0]
    assert table.knob(0.65).tolist() == [0.5]  # 0.0 reaches 0.6 only
    assert table.knob(0.75).tolist() == [0.5]  # unreachable on the envelope: the best raw accuracy
    assert table.knob(np.array([0.55, 0.7])).tolist() == [0.0, 0.5]
    assert KnobTable(np.array([0.0, 1.0]), np.array([0.6, 0.9]), margin=0.05).knob(0.58).tolist() == [1.0]
    # the highest tau validation supports: the envelope's top minus the margin
    assert table.validated_top == pytest.approx(0.7)
    assert KnobTable(np.array([0.0, 1.0]), np.array([0.6, 0.9]), margin=0.05).validated_top == pytest.approx(0.85)


def test_knob_table_mixes_the_two_frontier_knobs_around_tau():
    # knob 0.5 costs more than the chord from 0.0 to 1.0 buys: off the frontier
    table = KnobTable(np.array([0.0, 0.5, 1.0]), np.array([0.6, 0.7, 0.9]), val_cost=np.array([1.0, 3.0, 4.0]))
    assert table.frontier.tolist() == [0, 2]
    draws = (np.arange(1000) + 0.5) / 1000
    knobs = table.mixed_knobs(0.75, draws)  # (0.75 - 0.6) / (0.9 - 0.6): half the queries at 1.0
    assert set(knobs.tolist()) == {0.0, 1.0} and np.mean(knobs == 1.0) == pytest.approx(0.5)
    assert np.array_equal(knobs == 1.0, draws < 0.5)  # the draw decides, query by query
    per_query = table.mixed_knobs(np.array([0.55, 0.9, 0.95]), np.array([0.99, 0.99, 0.0]))
    assert per_query.tolist() == [0.0, 1.0, 1.0]  # below the cheapest point; the top; beyond validation
    with pytest.raises(ValueError, match="val_cost"):
        KnobTable(np.array([0.0, 1.0]), np.array([0.6, 0.9])).mixed_knobs(0.7, draws)


@pytest.mark.parametrize("router_class", [CalibratedThresholdRouter, OmniRouterRouter])
def test_mixed_knob_router_routes_each_query_at_its_drawn_knob(synth_ctx, synth_splits, router_class):
    test = synth_splits[2]
    base = router_class().fit(synth_ctx)
    draws = np.random.default_rng(0).random(len(test))
    mixed = MixedKnobRouter(base)
    assert mixed.name == f"{base.name} + mixing" and mixed.validated_top() == base.validated_top()
    with pytest.raises(ValueError, match="draws"):
        mixed.route_split(test, 0.6)
    split = Split(test.emb, test.scores, test.costs, draws)
    lo, hi = base.table.envelope[base.table.frontier[[0, -1]]]
    tau = float((lo + hi) / 2)
    knobs = base.table.mixed_knobs(tau, draws)
    assert len(np.unique(knobs)) == 2
    expected = base.route_knobs(test.emb, test.costs, knobs)
    assert np.array_equal(mixed.route_split(split, tau).assign, expected)
    for knob in np.unique(knobs):  # each group routes as the plain router at that knob would
        rows = knobs == knob
        alone = base.route_knobs(test.emb, test.costs, np.full(len(test), knob))
        assert np.array_equal(expected[rows], alone[rows])


def test_validated_top_of_routers(synth_ctx):
    router = CalibratedThresholdRouter().fit(synth_ctx)
    assert router.validated_top() == pytest.approx(router.table.envelope[-1] - synth_ctx.margin)
    assert MLPRouter().fit(synth_ctx).validated_top() is None  # not tuned per tau


def test_calibrated_threshold_choice_rule():
    p = np.array([[0.9, 0.5, 0.95], [0.2, 0.3, 0.4]])
    costs = np.array([[3.0, 1.0, 2.0], [1.0, 2.0, 3.0]])
    # row 0: models 0 and 2 clear 0.8, model 2 is cheaper; row 1: none clears -> argmax p
    assert CalibratedThresholdRouter.choose(p, costs, np.array([0.8, 0.8])).tolist() == [2, 2]
    assert CalibratedThresholdRouter.choose(p, costs, np.array([0.0, 0.0])).tolist() == [1, 0]


def test_calibrated_threshold_follows_tau(synth_ctx, synth_splits):
    test = synth_splits[2]
    router = CalibratedThresholdRouter().fit(synth_ctx)
    taus = [0.5, 0.6, 0.7, 0.8]
    knobs = [router.table.knob(t)[0] for t in taus]
    assert knobs == sorted(knobs)
    low, high = acc_cost(router, synth_ctx.val, 0.5), acc_cost(router, synth_ctx.val, 0.75)
    assert high[0] >= low[0] and high[1] >= low[1]
    assert low[0] >= 0.5  # reached on validation, where the threshold was picked
    # one tau per query gives the same routes as one call per tau
    per_query = router.route(test.emb, test.costs, np.array([0.5] * 50 + [0.75] * 50)).assign
    expected = np.r_[router.route(test.emb, test.costs, 0.5).assign[:50], router.route(test.emb, test.costs, 0.75).assign[50:]]
    assert np.array_equal(per_query, expected)
    with pytest.raises(ValueError, match="needs tau"):
        router.route(test.emb, test.costs)


def test_omnirouter_lagrangian(synth_ctx, synth_splits):
    test = synth_splits[2]
    router = OmniRouterRouter().fit(synth_ctx)
    p = router.predict(test.emb)
    c_hat = test.costs / router.cost_scale
    for alpha in (0.5, 0.6, 0.7):
        choice = router.solve(p, c_hat, alpha)
        assert p[np.arange(len(p)), choice].mean() >= alpha - 1e-9  # the batch constraint holds on predictions
    # the least-cost routing meeting a lower alpha is no dearer
    cost = [c_hat[np.arange(len(p)), router.solve(p, c_hat, a)].mean() for a in (0.5, 0.6, 0.7)]
    assert cost == sorted(cost)
    # infeasible alpha: maximise predicted accuracy
    assert np.array_equal(router.solve(p, c_hat, 1.5), p.argmax(axis=1))
    accs = [acc_cost(router, synth_ctx.val, t)[0] for t in (0.5, 0.7)]
    assert accs[1] >= accs[0]
    with pytest.raises(ValueError, match="one scalar tau"):
        router.route(test.emb, test.costs, np.array([0.5, 0.6]))


def _pairwise_split(n: int, seed: int) -> Split:
    """Model 0 (the anchor) is right on 80 % of rows; model 1 is right where feature 0 > 0.8 (about a
    fifth of rows, where the anchor is always wrong) and wrong elsewhere; model 2 is never right."""
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(n, 4)).astype(np.float32)
    special = emb[:, 0] > 0.8
    scores = np.zeros((n, 3))
    scores[:, 0] = np.where(special, 0.0, 1.0)
    scores[:, 1] = np.where(special, 1.0, 0.0)
    return Split(emb, scores, np.tile([1.0, 0.1, 0.01], (n, 1)))


def test_pairwise_switch_finds_where_another_model_beats_the_anchor():
    train, val, test = (_pairwise_split(n, seed) for n, seed in ((400, 0), (200, 1), (300, 2)))
    probe = PairwiseSwitchPredictor(train, val, anchor=0)
    assert set(probe.heads) == {1}  # model 2 never beats the anchor on train: no head, never chosen
    q = probe.win_probability(test.emb)
    assert q.shape == (300, 3) and (q[:, [0, 2]] == 0).all()
    choice = probe.choose(test.emb)
    special = test.emb[:, 0] > 0.8
    # separable: every row goes where the right model is, except at most a few at the boundary
    assert np.mean(choice == np.where(special, 1, 0)) >= 0.97
    routed = test.scores[np.arange(300), choice].mean()
    assert routed > test.scores[:, 0].mean() + 0.15


def test_pairwise_switch_stays_with_the_anchor_without_signal():
    def noise(n: int, seed: int) -> Split:
        # the anchor is right 90 % of the time, model 1 60 %, whatever the query: never worth a switch
        rng = np.random.default_rng(seed)
        scores = np.stack([rng.random(n) < 0.9, rng.random(n) < 0.6], axis=1).astype(float)
        return Split(rng.normal(size=(n, 6)).astype(np.float32), scores, np.tile([1.0, 0.1], (n, 1)))

    train, val, test = noise(300, 3), noise(150, 4), noise(300, 5)
    router = PairwiseSwitchRouter().fit(FitContext(train, val))
    assert router.predictor.anchor == 0
    assert (router.route(test.emb, test.costs).assign == 0).mean() >= 0.95
