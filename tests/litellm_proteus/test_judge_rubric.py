"""The judge rubric and the parse of its answer (``litellm_proteus.judge_rubric``), on real-looking and malformed outputs."""

from __future__ import annotations

import pytest

from litellm_proteus.judge_rubric import RUBRIC, judge_messages, parse_score


@pytest.mark.parametrize("text, expected", [
    ("The answer computes 2 + 2 correctly.\nSCORE: 1", 1.0),
    ("Partly right: the code misses the empty list.\nScore: 0.5", 0.5),
    ("Wrong capital.\n**SCORE:** 0", 0.0),
    ("SCORE: 1\nOn reflection the proof skips a case.\nSCORE: 0", 0.0),  # the last line counts
    ("I think it is fine.", None),  # no score line
    ("SCORE: 7", None),  # outside [0, 1]
    ("SCORE: maybe", None),
    ("", None),
    (None, None),
])
def test_parse_score(text, expected):
    assert parse_score(text) == expected


def test_rubric_message_carries_the_request_and_the_answer():
    messages = judge_messages("What is 2 + 2?", "4")
    assert messages[0]["content"] == RUBRIC and "SCORE: 1" in RUBRIC
    assert "What is 2 + 2?" in messages[1]["content"] and "## Assistant answer\n4" in messages[1]["content"]
