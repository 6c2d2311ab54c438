"""Benchmark prompts: real RouterBench prompts cut to an exact encoder-token length.

Source: the ``prompt`` column of ``<data>/routerbench-partial/*.csv`` (each cell is the string form
of a Python list of turns; the turns are joined with newlines, as the plugin joins messages).
Without the data, the package's ``prompts.json`` (generic prompts written for this benchmark) stands in.

A prompt of N tokens is N content tokens of the router's own tokenizer (special tokens not counted),
taken from the *end* of a prompt: that is what the encoder keeps (tail truncation), and RouterBench
prompts share their few-shot heads, so head cuts would all look alike.  Prompts shorter than N are
joined with the next ones (blank line between) until they are long enough.
"""

from __future__ import annotations

import ast
import json
import os
import random
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import Any

BUNDLED_PROMPTS = Path(__file__).resolve().parent / "prompts.json"
ROUTERBENCH_DIR = "routerbench-partial"


def default_data_dir() -> Path | None:
    """``$PROTEUS_SHARED_DATA`` or ``../shared/data`` beside the checkout, when it exists."""
    env = os.environ.get("PROTEUS_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[3] / "shared" / "data")
    return next((c for c in candidates if (c / ROUTERBENCH_DIR).is_dir()), None)


def _turns_text(cell: Any) -> str:
    """A RouterBench prompt cell (``"['turn 1', 'turn 2']"``) as plain text."""
    text = str(cell)
    if text.startswith("[") and text.endswith("]"):
        try:
            turns = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
        if isinstance(turns, (list, tuple)):
            return "\n".join(str(t) for t in turns)
    return text


def load_prompts(data_dir: str | os.PathLike | None, *, seed: int = 0) -> tuple[list[str], str]:
    """(distinct prompts in a seeded shuffled order, source description)."""
    files = sorted((Path(data_dir) / ROUTERBENCH_DIR).glob("*.csv")) if data_dir else []
    if files:
        import pandas as pd

        cells = [cell for f in files for cell in pd.read_csv(f, usecols=["prompt"])["prompt"].dropna()]
        prompts = [_turns_text(c) for c in cells]
        source = f"routerbench ({', '.join(f.name for f in files)})"
    else:
        prompts = list(json.loads(BUNDLED_PROMPTS.read_text())["prompts"])
        source = f"bundled ({BUNDLED_PROMPTS.name})"
    prompts = list(dict.fromkeys(p.strip() for p in prompts if p and p.strip()))
    random.Random(seed).shuffle(prompts)
    return prompts, source


def cut_prompts(prompts: list[str], token_offsets: Callable[[str], Sequence[tuple[int, int]]], n_tokens: int, count: int) -> list[str]:
    """``count`` distinct texts of ``n_tokens`` content tokens each (see the module docstring);
    ``token_offsets(text)``: the (start, end) characters of each content token (``Encoder.content_offsets``).

    Cuts fall on token boundaries of the original text (offset mapping), so the text stays real
    prose/code; re-tokenising a cut can differ by a token where a word was split mid-way."""
    if n_tokens < 1 or count < 1:
        raise ValueError(f"n_tokens and count must be >= 1; got {n_tokens}, {count}")
    if not prompts:
        raise ValueError("no prompts to cut")
    out: list[str] = []
    i = 0
    while len(out) < count and i < len(prompts) * 4:  # bounded: every prompt used at most ~4 times
        text = prompts[i % len(prompts)]
        i += 1
        offsets = token_offsets(text)
        while len(offsets) < n_tokens and i < len(prompts) * 4:
            text = text + "\n\n" + prompts[i % len(prompts)]
            i += 1
            offsets = token_offsets(text)
        if len(offsets) < n_tokens:
            break
        cut = text[offsets[len(offsets) - n_tokens][0] :]
        if cut not in out:
            out.append(cut)
    if not out:
        raise ValueError(f"the prompts hold fewer than {n_tokens} tokens in total")
    while len(out) < count:  # tiny prompt sets: repeat (the benchmark runs without embedding caches)
        out.extend(out[: count - len(out)])
    return out
