"""How far a faster decision path moves routing: embeddings and decisions vs the reference encoder.

The reference is the artifact's own encoder settings in fp32 (what training saw).  Reported:
cosine between the two embeddings of each prompt, and the fraction of (prompt, tau) decisions that
pick the same deployment.  This is a quick screen; ``proteus eval`` gives the routing-quality answer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from litellm_proteus.encoder import open_encoder
from litellm_proteus.predictor import ProteusPredictor

from .measure import BENCH_TAUS, bench_candidates


def compare_reference(
    predictor: ProteusPredictor,
    artifact: Path,
    prompts: list[str],
    *,
    progress: Callable[[str], None] | None = None,
) -> dict:
    spec = predictor.manifest.encoder
    encoder = predictor.encoder
    if (encoder.precision, encoder.quantize, encoder.max_tokens, encoder.truncation) == (
        "fp32", None, spec.max_tokens, spec.truncation
    ):
        return {"same_as_reference": True}
    if progress:
        progress(f"comparing with the fp32 reference encoder on {len(prompts)} prompts")
    reference = open_encoder(
        spec.resolve(artifact), device=predictor.device, max_tokens=spec.max_tokens, truncation=spec.truncation  # type: ignore[arg-type]
    )
    ref = reference.encode(prompts)
    fast = encoder.encode(prompts)
    cosine = (ref * fast).sum(axis=1)
    candidates = bench_candidates(predictor)
    same, mu_diff = [], []
    for tau in BENCH_TAUS:
        taus, cands = [tau] * len(prompts), [candidates] * len(prompts)
        a = predictor.decide_embeddings(ref, taus, cands)
        b = predictor.decide_embeddings(fast, taus, cands)
        same += [x.index == y.index for x, y in zip(a, b)]
        mu_diff += [abs(x.mu - y.mu) for x, y in zip(a, b)]
    return {
        "same_as_reference": False,
        "n_prompts": len(prompts),
        "cosine_mean": round(float(cosine.mean()), 5),
        "cosine_min": round(float(cosine.min()), 5),
        "decision_agreement": round(float(np.mean(same)), 4),
        "mu_max_abs_diff": round(float(np.max(mu_diff)), 5),
    }
