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


def test_requests_sharing_a_call_id_settle_only_their_own_picks():
    """Keys are per request (``serving_log.request_key``: the call id and the request's own id)."""
    ledger = AttemptLedger()
    ledger.open(("shared", "r1"), Attempt("a"))
    ledger.open(("shared", "r2"), Attempt("b"))
    assert ledger.answered(("shared", "r1"), "a") == (Attempt("a"), [])  # r2's pick stays open
    assert ledger.answered(("shared", "r2"), "b") == (Attempt("b"), [])
    ledger.open(("shared", "r3"), Attempt("a"))
    assert ledger.ended(("shared", "r4")) == [] and ledger.ended(("shared", "r3")) == [Attempt("a")]


class Strategy:  # what the ledger reads of a strategy: ``replaced_by``, set by a settings change
    replaced_by = None


def test_an_open_attempt_holds_its_strategy_weakly_and_follows_a_settings_change():
    import gc
    import weakref

    ledger = AttemptLedger()
    old, new = Strategy(), Strategy()
    ledger.open("c", Attempt("a", old, "k"))
    [attempt] = ledger._calls["c"]
    assert attempt.owner is old and attempt.key_hash == "k"
    old.replaced_by = new
    assert ledger.reassign(old, new) == 1
    gone = weakref.ref(old)
    del old
    gc.collect()
    assert gone() is None  # no open attempt keeps the replaced strategy alive
    ledger.open("c", Attempt("b", new))
    assert [(a.deployment_id, a.owner) for a in ledger.ended("c")] == [("a", new), ("b", new)]

    later = Strategy()
    later.replaced_by = new  # a pick that began under a strategy replaced meanwhile opens under its successor
    ledger.open("d", Attempt("a", later))
    assert ledger.ended("d")[0].owner is new
    lonely = Strategy()
    ledger.open("e", Attempt("a", lonely))
    del lonely
    gc.collect()
    assert ledger.ended("e")[0].owner is None  # its strategy is gone (its router too): no log to write to


def test_an_owner_that_takes_no_weak_reference_is_held():
    from types import SimpleNamespace

    owner = SimpleNamespace(replaced_by=None)
    assert Attempt("a", owner).owner is owner and Attempt("a").owner is None


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
