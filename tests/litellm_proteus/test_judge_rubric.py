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
    # real-looking judges: a period or a note after the number
    ("The answer gives the right capital.\nSCORE: 1    (correct)", 1.0),
    ("It handles the main case but not the empty list.\nSCORE: 0.5  (partly correct)", 0.5),
    ("The answer refuses the request.\nSCORE: 0    (wrong, off-topic or refused)", 0.0),
    ("The answer is right.\nSCORE: 1.", 1.0),
    ("Correct and complete.\r\nScore: 1 (correct).\r\n", 1.0),
    ("Partly right.\n**SCORE: 0.5** (partly correct)", 0.5),
    # malformed: still unscored
    ("Right.\nSCORE: 1/1", None),
    ("SCORE: 1 (correct) or maybe 0 (wrong)", None),
    ("SCORE: 1 because it is correct", None),
    ("SCORE: (correct)", None),
    ("SCORE: 1.5 (too generous)", None),
])
def test_parse_score(text, expected):
    assert parse_score(text) == expected


def test_the_rubrics_answer_lines_are_scored_as_written():
    """A judge that copies one of the answer lines verbatim is scored: the lines end with the number
    (the values' meaning is in the prose above them)."""
    lines = [line for line in RUBRIC.splitlines() if line.startswith("SCORE:")]
    assert lines == ["SCORE: 1", "SCORE: 0.5", "SCORE: 0"] and "(" not in "".join(lines)
    assert [parse_score(f"Some reasoning.\n{line}") for line in lines] == [1.0, 0.5, 0.0]
    assert all(meaning in RUBRIC for meaning in ("1 if the answer is correct", "0.5 if it is partly correct", "0 if it is wrong"))


def test_rubric_message_carries_the_request_and_the_answer():
    messages = judge_messages("What is 2 + 2?", "4")
    assert messages[0]["content"] == RUBRIC and "SCORE: 1" in RUBRIC
    assert "What is 2 + 2?" in messages[1]["content"] and "## Assistant answer\n4" in messages[1]["content"]
