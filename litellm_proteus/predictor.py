"""Plain-Python routing decisions from a trained artifact (no LiteLLM here).

``ProteusPredictor.decide`` takes prompts, requested taus and, per request, the candidate
deployments as (slot index, estimated USD cost of this request on that deployment).  Several
deployments may play the same slot (same model, different prices/regions): each candidate is scored
with its own live cost.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .artifact import DEFAULT_ARTIFACT_DIR, Manifest, load_artifact
from .model import INFERENCE_LAMBDA, routing_scores


@dataclass(frozen=True)
class Candidate:
    slot: int  # index into manifest.models
    cost_usd: float  # this request's estimated cost on this deployment


@dataclass(frozen=True)
class Decision:
    index: int  # position of the chosen candidate in the list passed in
    slot: int
    model: str  # trained slot name
    mu: float
    tau_requested: float
    tau_effective: float  # after clamping to the artifact's tau_range
    clamped: bool
    p: tuple[float, ...]  # predicted correctness per candidate
    scores: tuple[float, ...]


class TauMapper:
    """Requested tau -> (effective tau clamped to tau_range, tau_norm fed to the policy)."""

    def __init__(self, manifest: Manifest):
        self.lo, self.hi = manifest.tau_range
        self._manifest = manifest
        cal = manifest.calibration
        self._cal = (np.asarray(cal.requested), np.asarray(cal.policy_tau)) if cal.requested else None

    def effective(self, tau: float) -> tuple[float, bool]:
        clamped = min(max(float(tau), self.lo), self.hi)
        return clamped, clamped != float(tau)

    def policy_tau_norm(self, tau_effective: float) -> float:
        policy_tau = tau_effective if self._cal is None else float(np.interp(tau_effective, *self._cal))
        return self._manifest.tau_norm(policy_tau)


class ProteusPredictor:
    def __init__(
        self,
        artifact: str | os.PathLike | None = None,
        *,
        device: str = "auto",
        encoder_cache_dir: str | None = None,
    ):
        import torch

        from .encoder import TextEncoder, resolve_device

        self.device = resolve_device(device)
        self.artifact_dir = Path(artifact) if artifact else DEFAULT_ARTIFACT_DIR
        self.model, self.manifest = load_artifact(self.artifact_dir, map_location="cpu")
        self.model.to(self.device)
        spec = self.manifest.encoder
        self.encoder = TextEncoder(
            spec.name,
            device=self.device,
            max_tokens=spec.max_tokens,
            truncation=spec.truncation,  # type: ignore[arg-type]
            cache_dir=encoder_cache_dir,
        )
        if self.encoder.embed_dim != spec.embed_dim:
            raise ValueError(
                f"encoder {spec.name!r} produces {self.encoder.embed_dim}-d embeddings, artifact expects {spec.embed_dim}"
            )
        self.taus = TauMapper(self.manifest)
        self.costs = self.manifest.cost_normalizer
        self._torch = torch

    @property
    def models(self) -> list[str]:
        return self.manifest.models

    def decide(
        self, texts: Sequence[str], taus: Sequence[float], candidates: Sequence[Sequence[Candidate]]
    ) -> list[Decision]:
        return self.decide_embeddings(self.encoder.encode(texts), taus, candidates)

    def decide_embeddings(
        self, embeddings: np.ndarray, taus: Sequence[float], candidates: Sequence[Sequence[Candidate]]
    ) -> list[Decision]:
        torch = self._torch
        if not (len(embeddings) == len(taus) == len(candidates)):
            raise ValueError("embeddings, taus and candidates must have the same length")
        if any(len(c) == 0 for c in candidates):
            raise ValueError("every request needs at least one candidate deployment")
        effective = [self.taus.effective(t) for t in taus]
        tau_norm = torch.tensor([self.taus.policy_tau_norm(t) for t, _ in effective], dtype=torch.float32)
        with torch.inference_mode():
            emb = torch.as_tensor(np.asarray(embeddings, dtype=np.float32), device=self.device)
            z = self.model.embed(emb)
            p_all = torch.sigmoid(self.model.performance_logits(z)).cpu()
            mu = self.model.policy(z, tau_norm.to(self.device), INFERENCE_LAMBDA).mean.cpu()
            boost = self.model.boost.detach().cpu()
            gamma = self.model.gamma.detach().cpu()
        decisions = []
        for row, cands in enumerate(candidates):
            slots = torch.tensor([c.slot for c in cands])
            cost_norm = torch.as_tensor(self.costs.normalize([c.cost_usd for c in cands]))
            p = p_all[row, slots]
            s = routing_scores(p.unsqueeze(0), mu[row : row + 1], boost[slots], gamma, cost_norm).squeeze(0)
            best = int(s.argmax())
            tau_eff, clamped = effective[row]
            decisions.append(
                Decision(
                    index=best,
                    slot=cands[best].slot,
                    model=self.models[cands[best].slot],
                    mu=float(mu[row]),
                    tau_requested=float(taus[row]),
                    tau_effective=tau_eff,
                    clamped=clamped,
                    p=tuple(float(x) for x in p),
                    scores=tuple(float(x) for x in s),
                )
            )
        return decisions
