"""Operating-point rules (``litellm_proteus.operating_points``) and how the predictor applies them."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR, Manifest, TauCalibration, load_artifact
from litellm_proteus.model import INFERENCE_LAMBDA
from litellm_proteus.operating_points import NO_CHOICE, POLICY, OperatingPoint, rule_picks
from litellm_proteus.predictor import Candidate, ProteusPredictor, TauMapper, frontier_share


def test_rules_pick_among_live_candidates():
    # request 0: slot 2 played by two deployments -> the cheaper; request 1: slot 2 not live -> policy
    slots = np.array([[0, 2, 2], [0, 1, 1]])
    costs = np.array([[1.0, 3.0, 2.0], [1.0, 2.0, 3.0]])
    p = np.array([[0.2, 0.9, 0.9], [0.5, 0.4, 0.9]])
    boost = np.zeros_like(p)
    valid = np.ones_like(p, dtype=bool)
    rule = OperatingPoint(kind="slot", slot=2)
    assert rule_picks([rule, rule], p, boost, slots, costs, valid).choice.tolist() == [2, NO_CHOICE]
    # quality: argmax p + b, ties to the cheaper deployment; padding never chosen
    quality = OperatingPoint(kind="quality")
    valid[1, 2] = False
    assert rule_picks([quality, quality], p, boost, slots, costs, valid).choice.tolist() == [2, 0]
    assert rule_picks([POLICY, quality], p, boost, slots, costs, valid).choice.tolist() == [NO_CHOICE, 0]


def test_a_repriced_slot_or_cluster_pick_gives_way_to_the_cheapest_candidate_predicted_no_worse():
    slots = np.array([[0, 1, 2, 3], [0, 1, 2, 3]])
    costs = np.array([[5.0, 2.0, 9.0, 1.0], [5.0, 2.0, 9.0, 1.0]])
    p = np.array([[0.8, 0.7, 0.9, 0.6], [0.8, 0.7, 0.6, 0.5]])  # calibrated p the decision shows
    boost, valid = np.zeros_like(p), np.ones_like(p, dtype=bool)
    as_trained = np.array([[True, True, False, True], [True, True, False, True]])
    rule = OperatingPoint(kind="slot", slot=2)
    # row 0: slot 2 (p 0.9) has no cheaper candidate at least as accurate -> kept, at its live price;
    # row 1: slot 2 (p 0.6) -> the cheapest with p >= 0.6: slot 1 (cost 2), not slot 3 (p 0.5)
    picked = rule_picks([rule, rule], p, boost, slots, costs, valid, priced_as_trained=as_trained, p_shown=p).choice
    assert picked.tolist() == [2, 1]
    picks = rule_picks([rule, rule], p, boost, slots, costs, valid, priced_as_trained=as_trained, p_shown=p)
    assert picks.choice.tolist() == [2, 1] and picks.repriced_from.tolist() == [NO_CHOICE, 2]  # row 1 gave slot 2 up
    assert rule_picks([rule, rule], p, boost, slots, costs, valid).choice.tolist() == [2, 2]  # without prices: as trained
    embeddings, centroids = np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 0.0], [0.0, 1.0]])
    ladder = OperatingPoint(kind="cluster", cluster_slots=[0, 2])  # row 0 -> slot 0 (as trained), row 1 -> slot 2
    picks = rule_picks([ladder, ladder], p, boost, slots, costs, valid, embeddings, centroids, as_trained, p)
    assert picks.choice.tolist() == [0, 1] and picks.repriced_from.tolist() == [NO_CHOICE, 2]
    quality = OperatingPoint(kind="quality")  # the top buys quality at any price, as the policy's top does
    assert rule_picks([quality, quality], p, boost, slots, costs, valid, priced_as_trained=as_trained, p_shown=p).choice.tolist() == [2, 0]


def test_cluster_rule_maps_the_nearest_centroid_to_a_slot():
    centroids = np.array([[1.0, 0.0], [0.0, 1.0]])
    emb = np.array([[0.9, 0.1], [0.2, 0.8]])
    rule = OperatingPoint(kind="cluster", cluster_slots=[1, 0])
    slots = np.array([[0, 1], [0, 1]])
    ones = np.ones((2, 2))
    picked = rule_picks([rule, rule], ones, ones, slots, ones, ones.astype(bool), emb, centroids).choice
    assert picked.tolist() == [1, 0]
    with pytest.raises(ValueError, match="centroids"):
        rule_picks([rule], ones[:1], ones[:1], slots[:1], ones[:1], ones[:1].astype(bool)).choice


def test_operating_point_fields_are_validated():
    with pytest.raises(ValueError, match="slot"):
        OperatingPoint(kind="slot")
    with pytest.raises(ValueError, match="cluster_slots"):
        OperatingPoint(kind="cluster")
    with pytest.raises(ValueError, match="kind"):
        OperatingPoint(kind="cheapest")
    with pytest.raises(ValueError, match="frontier_point"):
        TauCalibration(frontier_policy_tau=[0.7], frontier_accuracy=[0.7], frontier_cost_usd=[1.0], frontier_point=[POLICY, POLICY])


def test_manifest_rejects_a_rule_slot_outside_the_models(build_random_artifact):
    bad = TauCalibration(
        frontier_policy_tau=[0.7], frontier_accuracy=[0.7], frontier_cost_usd=[1.0],
        frontier_point=[OperatingPoint(kind="slot", slot=99)],
    )
    with pytest.raises(ValueError, match="outside"):
        build_random_artifact(["a", "b"], calibration=bad)


def test_an_artifact_without_rules_routes_by_its_policy_alone(tmp_path):
    """An artifact without rules (the format before operating-point rules: the bundled artifact with
    its rule fields removed) routes exactly as eq. 2 at its calibrated policy tau (mixed or not)."""
    artifact = tmp_path / "policy-only"
    shutil.copytree(DEFAULT_ARTIFACT_DIR, artifact)
    raw = json.loads((artifact / "manifest.json").read_text())
    assert raw["calibration"]["frontier_point"]  # the bundled artifact has rules: they are removed here
    for field in ("requested_point", "frontier_point", "centroids"):
        raw["calibration"].pop(field, None)
    (artifact / "manifest.json").write_text(json.dumps(raw))
    model, manifest = load_artifact(artifact)
    cal = manifest.calibration
    assert not cal.requested_point and not cal.frontier_point and not cal.centroids
    predictor = ProteusPredictor(artifact, device="cpu")
    rng = np.random.default_rng(0)
    n, k = 64, len(manifest.models)
    emb = rng.normal(size=(n, manifest.encoder.embed_dim)).astype(np.float32)
    costs = rng.uniform(1e-5, 1e-2, size=(n, k))
    taus = rng.uniform(*manifest.tau_range, size=n)
    draws = rng.uniform(size=n)
    cands = [[Candidate(s, float(costs[i, s])) for s in range(k)] for i in range(n)]
    for row_draws in (None, draws):
        decisions = predictor.decide_embeddings(emb, taus, cands, None if row_draws is None else list(row_draws))
        expected_taus = []
        for i, tau in enumerate(taus):
            if row_draws is not None and cal.frontier_policy_tau:
                lower, upper, share = frontier_share(np.asarray(cal.frontier_accuracy), tau + cal.margin)
                expected_taus.append(cal.frontier_policy_tau[upper if row_draws[i] < share else lower])
            else:
                expected_taus.append(float(np.interp(tau, cal.requested, cal.policy_tau)))
        tau_norm = torch.tensor([manifest.tau_norm(t) for t in expected_taus], dtype=torch.float32)
        with torch.inference_mode():
            out = model.route(torch.as_tensor(emb), tau_norm, torch.as_tensor(manifest.cost_normalizer.normalize(costs)), lam=INFERENCE_LAMBDA)
        assert [d.policy_tau for d in decisions] == pytest.approx(expected_taus)
        assert [d.slot for d in decisions] == out.choice.tolist()
        assert {d.rule for d in decisions} == {"policy"}


RULE_FRONTIER = TauCalibration(
    requested=[0.7, 0.8, 0.9],
    policy_tau=[0.7, 0.75, 0.9],
    requested_point=[OperatingPoint(kind="slot", slot=1), POLICY, OperatingPoint(kind="quality")],
    margin=0.0,
    frontier_policy_tau=[0.7, 0.8, 0.9],
    frontier_accuracy=[0.70, 0.80, 0.90],
    frontier_cost_usd=[1e-4, 1e-3, 1e-2],
    frontier_point=[OperatingPoint(kind="slot", slot=1), POLICY, OperatingPoint(kind="quality")],
)


def test_predictor_applies_rule_points_and_falls_back_to_the_policy(make_artifact):
    predictor = ProteusPredictor(make_artifact(["a", "b", "c"], calibration=RULE_FRONTIER), device="cpu")
    emb = np.random.default_rng(1).normal(size=(4, 384)).astype(np.float32)
    live = [Candidate(0, 1e-3), Candidate(1, 5e-4), Candidate(2, 1e-2)]
    # draw 0.99 at tau 0.7 -> the lowest frontier point: slot 1
    picked = predictor.decide_embeddings(emb, [0.7] * 4, [live] * 4, [0.99] * 4)
    assert [d.model for d in picked] == ["b"] * 4 and {d.rule for d in picked} == {"slot:1"}
    # slot 1 not live -> the policy at the point's policy tau (0.7)
    for draws in ([0.99] * 4, None):  # the frontier's point, and the table's entry at tau 0.7
        without = predictor.decide_embeddings(emb, [0.7] * 4, [[live[0], live[2]]] * 4, draws)
        assert {d.rule for d in without} == {"policy"} and all(d.policy_tau == 0.7 for d in without)
    # slot 1 priced far above training -> the cheapest candidate whose calibrated p is at least slot 1's
    repriced = [live[0], Candidate(1, 5e-2, priced_as_trained=False), live[2]]
    dearer = predictor.decide_embeddings(emb, [0.7] * 4, [repriced] * 4, [0.99] * 4)
    for d in dearer:
        no_worse = [i for i, c in enumerate(repriced) if d.p[i] >= d.p[1] - 1e-12]
        assert d.index == min(no_worse, key=lambda i: repriced[i].cost_usd) and d.rule == "slot:1"
        assert d.repriced_from == ("b" if d.index != 1 else None)  # what the rule picked, where it gave way
    assert any(d.index != 1 for d in dearer)  # a pick gave way (so the check above can fail)
    assert {d.repriced_from for d in picked} == {None}  # priced as trained: the rule's pick stands
    # without draws, the step table: tau 0.85 -> the 0.9 entry (quality) -> argmax p + b
    quality = predictor.decide_embeddings(emb, [0.85] * 4, [live] * 4)
    p_plus_b = np.array([d.p for d in quality]) + predictor.network.boost[None, :]
    assert [d.index for d in quality] == p_plus_b.argmax(1).tolist()
    assert {d.rule for d in quality} == {"quality"}


def test_tau_mapper_table_with_rules_is_a_step_function(build_random_artifact):
    _, manifest = build_random_artifact(["a", "b", "c"], calibration=RULE_FRONTIER)
    mapper = TauMapper(manifest)
    assert mapper.operating_point(0.7) == (0.7, OperatingPoint(kind="slot", slot=1))
    assert mapper.operating_point(0.71) == (0.75, POLICY)  # the next entry, not interpolated
    assert mapper.operating_point(0.9) == (0.9, OperatingPoint(kind="quality"))
    assert mapper.operating_point(0.85, 0.1) == (0.9, OperatingPoint(kind="quality"))  # mixing: share 0.5 -> upper
    assert mapper.operating_point(0.85, 0.9) == (0.8, POLICY)


def test_manifest_round_trip_keeps_rules(build_random_artifact):
    _, manifest = build_random_artifact(["a", "b", "c"], calibration=RULE_FRONTIER)
    again = Manifest.model_validate_json(manifest.model_dump_json())
    assert again.calibration.frontier_point == RULE_FRONTIER.frontier_point


def test_an_infinite_cost_never_lets_a_rule_pick_a_candidate_outside_its_slot():
    """A huge finite price times the tokens is an infinite cost: a slot rule whose candidates all
    cost inf still picks one of them, not candidate 0 of another slot."""
    rule = OperatingPoint(kind="slot", slot=4)
    p = np.array([[0.9, 0.6]])
    boost = np.zeros((1, 2))
    slots = np.array([[0, 4]])
    valid = np.ones((1, 2), dtype=bool)
    for costs in (np.array([[np.inf, np.inf]]), np.array([[1.0, np.inf]])):
        assert rule_picks([rule], p, boost, slots, costs, valid).choice.tolist() == [1]
    quality = OperatingPoint(kind="quality")  # the best p + b, however it is priced
    assert rule_picks([quality], np.array([[0.6, 0.9]]), boost, slots, np.array([[1.0, np.inf]]), valid).choice.tolist() == [1]
