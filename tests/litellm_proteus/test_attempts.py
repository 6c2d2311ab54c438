"""The attempt ledger: which PROTEUS pick each outcome of a call belongs to (``litellm_proteus/attempts.py``)."""

from __future__ import annotations

from litellm_proteus.attempts import (
    Attempt,
    AttemptLedger,
    answering_deployment_id,
    breadcrumb_error,
    error_text,
    metadatas_of,
)


def test_a_retry_settles_the_picks_litellms_breadcrumbs_name_as_failed():
    ledger = AttemptLedger()
    ledger.open("c", Attempt("a"))
    assert ledger.repicked("c", []) == []  # no breadcrumb: nothing known to have failed
    assert ledger.repicked("c", ["b"]) == []
    assert ledger.repicked("c", ["a"]) == [Attempt("a")]
    assert ledger.repicked("c", ["a"]) == []  # settled once
    ledger.open("c", Attempt("b"))
    assert ledger.answered("c", "b") == (Attempt("b"), [])
    assert ledger.answered("c", "b") == (None, [])  # a repeated callback settles nothing twice
    assert ledger.known("c") and not ledger.known("other")


def test_a_failure_callback_settles_only_a_pick_of_its_deployment():
    ledger = AttemptLedger()
    ledger.open("c", Attempt("a"))
    assert ledger.failed("c", "plain") is None  # a fallback group's deployment: no pick of PROTEUS
    assert ledger.failed("c", None) is None
    assert ledger.failed("c", "a") == Attempt("a")
    assert ledger.failed("c", "a") is None


def test_an_answer_from_another_deployment_settles_the_open_picks_as_failed():
    ledger = AttemptLedger()
    ledger.open("c", Attempt("a"))
    ledger.open("c", Attempt("b"))
    assert ledger.answered("c", "plain") == (None, [Attempt("a"), Attempt("b")])
    assert ledger.ended("c") == []
    assert ledger.answered("unknown", "a") == (None, [])


def test_the_same_deployment_picked_again_is_a_new_attempt():
    """A group with one candidate: the retry tries the deployment that failed."""
    ledger = AttemptLedger()
    ledger.open("c", Attempt("a"))
    assert ledger.failed("c", "a") == Attempt("a")
    assert ledger.repicked("c", ["a"]) == []  # already settled by the callback
    ledger.open("c", Attempt("a"))
    first, second = Attempt("a"), Attempt("a")
    ledger = AttemptLedger()
    ledger.open("d", first)
    ledger.open("d", second)  # no callback, no breadcrumb for the first: both open
    served, others = ledger.answered("d", "a")
    assert served is second and others == [first] and others[0] is first  # the latest answered


def test_the_request_end_settles_every_open_pick():
    ledger = AttemptLedger()
    ledger.open("c", Attempt("a"))
    ledger.open("c", Attempt("b"))
    assert ledger.ended("c") == [Attempt("a"), Attempt("b")] and ledger.ended("c") == []


def test_the_ledger_is_bounded_oldest_first():
    ledger = AttemptLedger(max_calls=3)
    for i in range(5):
        ledger.open(f"c{i}", Attempt("a"))
    assert len(ledger) == 3 and not ledger.known("c1") and ledger.known("c4")


def test_the_deployment_a_callback_is_about():
    assert answering_deployment_id({"litellm_params": {"model_info": {"id": "dep-1"}}}) == "dep-1"
    assert answering_deployment_id({"standard_logging_object": {"model_id": "dep-2"}}) == "dep-2"
    assert answering_deployment_id({"litellm_params": {"metadata": {"model_info": {"id": 7}}}}) == "7"
    assert answering_deployment_id({"litellm_params": {"model_info": None}, "metadata": {}}) is None


def test_the_error_of_an_attempt_from_litellms_retry_breadcrumbs():
    kwargs = {"metadata": {"previous_models": [
        {"deployment_id": "a", "exception_type": "InternalServerError", "exception_string": "first"},
        {"deployment_id": "b", "exception_type": "RateLimitError", "exception_string": "slow down"},
        {"model_info": {"id": "a"}, "exception_type": "Timeout", "exception_string": "second"},  # the older format
        "junk",
    ]}}
    metadatas = metadatas_of(kwargs)
    assert breadcrumb_error(metadatas, "a") == "Timeout: second"  # the latest failure of that deployment
    assert breadcrumb_error(metadatas, "b") == "RateLimitError: slow down"
    assert breadcrumb_error(metadatas, "c") is None
    assert breadcrumb_error([{"previous_models": 5}], "a") is None
    assert error_text(ValueError("x" * 2000)).startswith("ValueError: x") and len(error_text(ValueError("x" * 2000))) == 1000
    assert error_text(None) == "unknown error"
