"""``examples/prometheus/proteus-alerts.yaml``: every rule is valid PromQL (parsed by promql-parser),
names only series a routing strategy exports, and the realised-accuracy rule computes the bound the
controller reports (``compliance.realised_bounds``) from the values a real router scrapes."""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path

import litellm
import promql_parser
import pytest
import yaml
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from litellm_proteus import compliance_metrics, shadow_metrics
from litellm_proteus.compliance import realised_bounds
from litellm_proteus.feedback import send_feedback
from litellm_proteus.observability import metrics as decision_metrics
from litellm_proteus.router_strategy import proteus_hook

from .test_strategy import QUESTION, model_list, upstream  # noqa: F401  (fixture)

RULES = Path(__file__).parents[3] / "examples" / "prometheus" / "proteus-alerts.yaml"
METRIC = re.compile(r"\bproteus_[a-z_]+\b")
BELOW_TAU = " < on (state_key) proteus_tau"


@pytest.fixture(autouse=True)
def hook_and_transport(monkeypatch):
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)  # respx mocks httpx
    monkeypatch.setattr(litellm, "callbacks", [proteus_hook])


def rules() -> dict[str, dict]:
    [group] = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for rule in group["rules"]}


def test_every_rule_is_valid_promql_with_a_severity_and_a_description():
    found = rules()
    assert {"ProteusTauInfeasible", "ProteusRealisedBelowTau", "ProteusDecisionLogDropping"} <= set(found)
    for name, rule in found.items():
        promql_parser.parse(rule["expr"])  # raises on a syntax error
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s")), name
    with pytest.raises(ValueError):
        promql_parser.parse("proteus_infeasible == ")  # so the parser can fail


def scrape() -> tuple[set[str], dict[str, dict[str, float]]]:
    """The sample names /metrics would show, and per state key its samples' values."""
    names: set[str] = set()
    by_state: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        names.add(family.name + ("_total" if family.type == "counter" else ""))  # a labelled counter with no series yet
        for sample in family.samples:
            names.add(sample.name)
            if "state_key" in sample.labels:
                by_state.setdefault(sample.labels["state_key"], {})[sample.name] = sample.value
    return names, by_state


def bound_of(expr: str, values: dict[str, float]) -> float:
    """The left side of the realised-accuracy rule, evaluated with a state's scraped values."""
    left = expr.split(BELOW_TAU)[0]
    python = METRIC.sub(lambda m: repr(values[m.group(0)]), left).replace("^", "**").replace("sqrt", "math.sqrt")
    return eval(python, {"math": math})  # noqa: S307 - arithmetic on numbers this test wrote


def test_the_rules_read_what_a_router_exports_and_the_realised_rule_fires_on_proven_shortfall(
        steerable_artifact, tmp_path, upstream):  # noqa: F811
    args = {"artifact": str(steerable_artifact), "tiers": {"alerting": 0.9, "standard": 0.85},
            "default_tier": "alerting", "decision_log": {"dir": str(tmp_path / "log")},
            "compliance": {"min_decisions": 1, "breaker": {"enabled": True}}}
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    calls = [f"alert-{i}" for i in range(40)]

    async def route():
        for call_id in calls:
            await router.acompletion(model="proteus-auto", messages=QUESTION, litellm_call_id=call_id, metadata={})
        for _ in range(100):  # LiteLLM runs success callbacks as tasks of this loop
            await asyncio.sleep(0.02)

    asyncio.run(route())
    for call_id in calls:  # every answer wrong: the labels prove the tier below tau
        send_feedback(call_id, 0.0)
    shadow_metrics.metrics(), decision_metrics()  # registered as the proxy registers them (counters: at start)
    names, by_state = scrape()
    for name, rule in rules().items():
        for metric in METRIC.findall(rule["expr"]):
            assert metric in names, f"{name} reads {metric}, which no strategy exports"
    state = by_state["tier:alerting@0.9"]
    assert state["proteus_tau"] == 0.9 and state["proteus_realised_labels"] == 40
    expr = rules()["ProteusRealisedBelowTau"]["expr"]
    upper = bound_of(expr, state)
    assert upper == pytest.approx(realised_bounds(40, 0.0)[2])  # the controller's Wilson interval
    assert upper < state["proteus_tau"]  # 0 of 40 right: proven below 0.9, so the rule fires
    good = {**state, "proteus_realised_accuracy": 0.85}  # 34 of 40: 0.9 within noise, so it does not
    assert bound_of(expr, good) == pytest.approx(realised_bounds(40, 34.0)[2]) and bound_of(expr, good) > 0.9


def test_the_tau_of_a_state_key():
    assert compliance_metrics.state_tau("tier:premium@0.85") == 0.85
    assert compliance_metrics.state_tau("tier:a@b@0.7") == 0.7  # a tier name may hold "@"
    assert compliance_metrics.state_tau("tau:0.91") == 0.91  # a bucket's bottom
    assert compliance_metrics.state_tau("tier:premium") is None  # a key of another form: no tau series
