"""The LLM-judge rubric and the parse of its answer, shared by ``proteus judge`` (offline) and the
proxy's shadow evaluation (``litellm_proteus.shadow``): both score an answer the same way.

The judge is asked whether the answer correctly and completely does what the user asked, ignoring
style, and to end with ``SCORE: 1``, ``SCORE: 0.5`` or ``SCORE: 0``; the last such line counts.  A
judge that adds a period or a parenthetical note after the number (``SCORE: 1.``, ``SCORE: 0.5
(partly correct)``) is read as meaning the number.  An answer without such a line, or with a value
outside [0, 1], is *unscored* (``None``), never guessed.
"""

from __future__ import annotations

import re

RUBRIC = (
    "You grade one answer of an AI assistant.  Decide only whether the answer correctly and completely does what "
    "the user asked (facts, reasoning, code behaviour, requested format); ignore style and length.  Write at most "
    "two sentences of reasoning, then a last line that is exactly one of the three lines below, nothing after "
    "the number: 1 if the answer is correct, 0.5 if it is partly correct, 0 if it is wrong, off-topic or "
    "refused.\nSCORE: 1\nSCORE: 0.5\nSCORE: 0"
)
# The number may be followed by a period and one parenthetical note (a judge echoing the values'
# meaning), nothing else: "SCORE: 1/1" or "SCORE: 1 (correct) but 0 (...)" stay unscored.
SCORE_LINE = re.compile(r"score\s*[:=]\s*\**\s*([01](?:\.\d+)?|\.\d+)\.?\s*\**\s*(?:\([^()\n]*\)\s*\.?\s*\**\s*)?$",
                        re.IGNORECASE | re.MULTILINE)


def judge_messages(prompt: str, response: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": RUBRIC},
            {"role": "user", "content": f"## User request\n{prompt}\n\n## Assistant answer\n{response}\n\nGrade the answer."}]


def parse_score(text: str | None) -> float | None:
    """The score on the judge's last ``SCORE: x`` line; None when there is none or it is outside [0, 1]."""
    if not text:
        return None
    found = SCORE_LINE.findall(text)
    if not found:
        return None
    value = float(found[-1])
    return value if 0.0 <= value <= 1.0 else None
