"""Plain-Python routing decisions from a trained artifact (no LiteLLM here).

Two parts: the network's forward pass, a backend (``forward_numpy.NumpyForward`` for static-table
artifacts on the CPU: no torch; ``forward_torch.TorchForward`` for transformer encoders and CUDA),
and the scoring and decision below, shared numpy code for both.

``ProteusPredictor.decide`` takes prompts, requested taus and, per request, the candidate
deployments as (slot index, estimated USD cost of this request on that deployment).  Several
deployments may play the same slot (same model, different prices/regions): each candidate is scored
with its own live cost.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from .artifact import DEFAULT_ARTIFACT_DIR, Manifest, read_manifest
from .devices import choose_device, cuda_usable
from .encoder import check_device_name, open_encoder, static_table_path
from .scoring import routing_scores

RUNTIMES: tuple[str, ...] = ("auto", "numpy", "torch")


class NetworkForward(Protocol):
    """A forward-pass backend: the artifact's manifest, the learned boosts and gamma, and
    ``forward(embeddings [B, D], policy_tau_norm [B]) -> (p_all [B, K], mu [B])``."""

    runtime: str
    manifest: Manifest
    boost: np.ndarray
    gamma: np.ndarray

    def forward(self, embeddings: np.ndarray, policy_tau_norm: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...
from .operating_points import NO_CHOICE, POLICY, OperatingPoint, rule_picks


@dataclass(frozen=True)
class Candidate:
    slot: int  # index into manifest.models
    cost_usd: float  # this request's estimated cost on this deployment
    # the deployment correction (deployment_correction.py): added to its calibrated p (clipped to
    # [0, 1]) and to the raw p of eq. 2 and the operating points' quality rule
    p_offset: float = 0.0
    # False: the live price is far above the one the fixed operating points were chosen at
    # (engine.DecisionEngine.priced_as_trained): a point picking it looks for a no dearer, no worse candidate
    priced_as_trained: bool = True


@dataclass(frozen=True)
class Decision:
    index: int  # position of the chosen candidate in the list passed in
    slot: int
    model: str  # trained slot name
    mu: float
    tau_requested: float
    tau_effective: float  # after clamping to the artifact's tau_range
    clamped: bool
    p: tuple[float, ...]  # predicted correctness per candidate (calibrated when the artifact has p_calibration)
    scores: tuple[float, ...]  # eq. 2 on the raw p the policy was trained with
    policy_tau: float | None = None  # the calibrated tau the policy saw (one of two when mixing)
    delta: float = 0.0  # the compliance controller's offset: routed at calibrated(tau_effective + delta)
    rule: str = "policy"  # the operating point's rule that chose (operating_points.OperatingPoint.label)
    # the slot the rule picked when, priced past rule_price_limit, it gave way to this choice (else None)
    repriced_from: str | None = None
    p_correction: tuple[float, ...] = ()  # per candidate, the correction included in p (empty: none)


def mixing_draw(text: str) -> float:
    """The request's draw u in [0, 1) for mixing two operating points: BLAKE2b of the prompt text.

    A hash, not a random number: independent of what the prompt asks (so the mixed accuracy is the
    mixture of the two points' accuracies), yet the same prompt always routes the same way, and
    offline evaluation (``train/routing.route_log``) reproduces the proxy's choices exactly."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def frontier_share(accuracy: np.ndarray, target: float) -> tuple[int, int, float]:
    """(lower index, upper index, share of requests at the upper) that reaches ``target`` by mixing
    two adjacent points of an increasing accuracy frontier; one point (share 1) at either end."""
    upper = int(np.searchsorted(accuracy, target - 1e-12))
    if upper == 0 or upper == len(accuracy):
        end = min(upper, len(accuracy) - 1)
        return end, end, 1.0
    return upper - 1, upper, float((target - accuracy[upper - 1]) / (accuracy[upper] - accuracy[upper - 1]))


class TauMapper:
    """Requested tau -> (effective tau clamped to tau_range, tau_norm fed to the policy)."""

    def __init__(self, manifest: Manifest):
        self.lo, self.hi = manifest.tau_range
        self._manifest = manifest
        cal = manifest.calibration
        self._cal = (np.asarray(cal.requested), np.asarray(cal.policy_tau)) if cal.requested else None
        self._frontier = (
            (np.asarray(cal.frontier_accuracy), np.asarray(cal.frontier_policy_tau)) if cal.frontier_policy_tau else None
        )
        self._margin = cal.margin
        self._frontier_points = cal.frontier_point
        self._requested_points = cal.requested_point
        self._frontier_p_ref = np.asarray(cal.frontier_p_ref) if cal.frontier_p_ref else None
        self._requested_p_ref = np.asarray(cal.requested_p_ref) if cal.requested_p_ref else None
        self.centroids = np.asarray(cal.centroids, dtype=np.float64) if cal.centroids else None

    def effective(self, tau: float) -> tuple[float, bool]:
        clamped = min(max(float(tau), self.lo), self.hi)
        return clamped, clamped != float(tau)

    def operating_point(self, tau_effective: float, draw: float | None = None) -> tuple[float, OperatingPoint]:
        """The calibrated policy tau and the operating point's rule.  Given the request's ``draw``
        and a frontier, the two hull points around accuracy tau + margin are mixed: the upper one
        with probability (target - acc_lower) / (acc_upper - acc_lower), i.e. when draw is below
        that share.  Without a draw, the table's policy tau interpolated; a table with rules is a
        step function instead: the first entry whose requested tau is at least tau."""
        if draw is not None and self._frontier is not None:
            accuracy, policy_taus = self._frontier
            lower, upper, share = frontier_share(accuracy, tau_effective + self._margin)
            at = upper if draw < share else lower
            return float(policy_taus[at]), self._frontier_points[at] if self._frontier_points else POLICY
        if self._cal is None:
            return tau_effective, POLICY
        if self._requested_points:
            requested, policy_taus = self._cal
            at = min(int(np.searchsorted(requested, tau_effective - 1e-12)), len(requested) - 1)
            return float(policy_taus[at]), self._requested_points[at]
        return float(np.interp(tau_effective, *self._cal)), POLICY

    def reference_p(self, tau_effective: float, mixing: bool) -> float | None:
        """The mean calibrated p of the chosen deployments that static calibration validated at
        ``tau_effective`` (``mixing``: as ``operating_point`` with draws, the two hull points'
        references in their shares); None when the artifact stores none for that routing."""
        if mixing and self._frontier is not None:
            if self._frontier_p_ref is None:
                return None
            lower, upper, share = frontier_share(self._frontier[0], tau_effective + self._margin)
            return float((1.0 - share) * self._frontier_p_ref[lower] + share * self._frontier_p_ref[upper])
        if self._cal is None or self._requested_p_ref is None:
            return None
        requested = self._cal[0]
        if self._requested_points:
            return float(self._requested_p_ref[min(int(np.searchsorted(requested, tau_effective - 1e-12)), len(requested) - 1)])
        return float(np.interp(tau_effective, requested, self._requested_p_ref))

    def policy_tau(self, tau_effective: float, draw: float | None = None) -> float:
        return self.operating_point(tau_effective, draw)[0]

    def policy_tau_norm(self, tau_effective: float, draw: float | None = None) -> float:
        return self._manifest.tau_norm(self.policy_tau(tau_effective, draw))


class ProteusPredictor:
    def __init__(
        self,
        artifact: str | os.PathLike | None = None,
        *,
        device: str = "auto",
        encoder_cache_dir: str | None = None,
        precision: str = "auto",
        quantize: str | None = None,
        memory_cache: int = 1024,
        threads: int | None = None,
        backend: str = "auto",
        max_tokens: int | None = None,
        truncation: str | None = None,
        max_batch_tokens: int | None = None,
        mix_operating_points: bool = True,
        runtime: str = "auto",
        cuda_graphs: bool = True,
        tokenizer_threads: int | None = None,
    ):
        """Speed options (see ``encoder.py``): ``backend`` auto|hf|fused (equal to the training
        encoder to ~1e-7), ``memory_cache`` = in-process LRU entries (exact; 0 = off), ``precision``
        auto (default: fp16 on CUDA, bf16 on CPUs with native bf16, else fp32; ``proteus eval
        --precision`` measures its routing) |fp32|bf16|fp16, ``quantize`` None|"int8" (moves
        embeddings and depends on the batch: evaluate first), ``threads`` = torch intra-op threads (process-wide; the numpy runtime
        runs one BLAS thread), ``max_tokens``/``truncation``
        override the artifact's length policy (changes embeddings), ``max_batch_tokens`` = padded
        tokens per forward pass (default: 2,048 on CPU, no limit on CUDA; 0 = no limit).

        ``mix_operating_points``: where the artifact stores a cost frontier, reach a tau between two
        operating points by routing a share of requests (by prompt hash) at each -- the cheapest
        way to the target on average.  False routes every request at the single point that meets
        tau alone: dearer, with more slack over tau in every window of traffic.

        ``runtime``: ``auto`` = ``numpy`` for a static-table artifact on the CPU (device ``cpu``, or
        ``auto`` on a host without a usable GPU; torch is never imported), else ``torch``; ``numpy`` forces the numpy forward (CPU); ``torch`` the
        torch one (needs the ``[train]`` extra or torch installed).

        ``cuda_graphs``: on a CUDA device, replay the encoder and the heads as captured CUDA graphs
        (``cuda_graphs.py``; no effect on the CPU).  ``tokenizer_threads``: threads tokenising a batch (None: the
        cores this process may use, at most 8)."""
        if runtime not in RUNTIMES:
            raise ValueError(f"predictor_options.runtime must be one of {RUNTIMES}; got {runtime!r}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1; got {threads}")
        check_device_name(device)
        self.artifact_dir = Path(artifact) if artifact else DEFAULT_ARTIFACT_DIR
        spec = read_manifest(self.artifact_dir).encoder
        static = static_table_path(spec.resolve(self.artifact_dir)) is not None
        if runtime == "auto":  # numpy: a static table on the CPU, where torch is never imported
            on_cpu = device == "cpu" or (device == "auto" and not cuda_usable())
            runtime = "numpy" if static and on_cpu else "torch"
        if runtime == "numpy":
            if device not in ("auto", "cpu"):
                raise ValueError(f"runtime 'numpy' runs on the CPU: device must be 'auto' or 'cpu'; got {device!r}")
            from .forward_numpy import NumpyForward

            self.device = "cpu"
            self.network: NetworkForward = NumpyForward(self.artifact_dir)
        else:
            self.device = choose_device(device)  # auto: see devices.py
        on_cuda = self.device.startswith("cuda")
        if not isinstance(cuda_graphs, bool):
            raise ValueError(f"predictor_options.cuda_graphs must be true or false; got {cuda_graphs!r}")
        self.cuda_graphs = cuda_graphs and on_cuda
        if runtime == "torch":
            from .forward_torch import TorchForward

            self.network = TorchForward(self.artifact_dir, self.device, cuda_graphs=self.cuda_graphs)
        if threads is not None and (runtime == "torch" or not static):
            import torch

            torch.set_num_threads(threads)
        self.manifest = self.network.manifest
        self.encoder = open_encoder(
            spec.resolve(self.artifact_dir),
            device=self.device,
            max_tokens=max_tokens or spec.max_tokens,
            truncation=truncation or spec.truncation,  # type: ignore[arg-type]
            cache_dir=encoder_cache_dir,
            precision=precision,
            quantize=quantize,
            memory_cache=memory_cache,
            backend=backend,
            max_batch_tokens=max_batch_tokens,
            tokenizer_threads=tokenizer_threads,
            cuda_graphs=self.cuda_graphs,
        )
        if self.encoder.embed_dim != spec.embed_dim:
            raise ValueError(
                f"encoder {spec.name!r} produces {self.encoder.embed_dim}-d embeddings, artifact expects {spec.embed_dim}"
            )
        self.taus = TauMapper(self.manifest)
        if not isinstance(mix_operating_points, bool):
            raise ValueError(f"predictor_options.mix_operating_points must be true or false; got {mix_operating_points!r}")
        self.mix_operating_points = mix_operating_points
        self.costs = self.manifest.cost_normalizer

    @property
    def models(self) -> list[str]:
        return self.manifest.models

    def decide(
        self,
        texts: Sequence[str],
        taus: Sequence[float],
        candidates: Sequence[Sequence[Candidate]],
        deltas: Sequence[float] | None = None,
    ) -> list[Decision]:
        draws = [mixing_draw(t) for t in texts] if self.mix_operating_points else None
        return self.decide_embeddings(self.encoder.encode(texts), taus, candidates, draws, deltas)

    def decide_embeddings(
        self,
        embeddings: np.ndarray,
        taus: Sequence[float],
        candidates: Sequence[Sequence[Candidate]],
        draws: Sequence[float] | None = None,
        deltas: Sequence[float] | None = None,
    ) -> list[Decision]:
        """``draws``: each request's ``mixing_draw`` (``decide`` hashes the prompts); None routes
        every request at the single calibrated policy tau that meets its tau alone.  ``deltas``: the
        compliance controller's offsets, routing each request at calibrated(tau_effective + delta)
        (past the top of the table: the top operating point)."""
        if not (len(embeddings) == len(taus) == len(candidates)):
            raise ValueError("embeddings, taus and candidates must have the same length")
        if draws is not None and len(draws) != len(taus):
            raise ValueError("draws must have one entry per request")
        if deltas is not None and len(deltas) != len(taus):
            raise ValueError("deltas must have one entry per request")
        if any(len(c) == 0 for c in candidates):
            raise ValueError("every request needs at least one candidate deployment")
        effective = [self.taus.effective(t) for t in taus]
        offsets = [0.0] * len(taus) if deltas is None else [float(d) for d in deltas]
        points = [
            self.taus.operating_point(t + offsets[row], None if draws is None else draws[row])
            for row, (t, _) in enumerate(effective)
        ]
        policy_taus = [tau for tau, _ in points]
        tau_norm = np.array([self.manifest.tau_norm(t) for t in policy_taus], dtype=np.float32)
        p_all, mu = self.network.forward(np.asarray(embeddings, dtype=np.float32), tau_norm)
        # All requests at once: candidates padded to the longest list; element-wise eq. 2 on the
        # same dtypes as a per-request loop, so scores and choices are identical to it.
        sizes = [len(c) for c in candidates]
        width = max(sizes)
        slots = np.zeros((len(candidates), width), dtype=np.int64)
        costs = np.ones((len(candidates), width), dtype=np.float64)
        as_trained = np.zeros((len(candidates), width), dtype=bool)
        corrected = any(c.p_offset for cands in candidates for c in cands)
        p_offsets = np.zeros((len(candidates), width), dtype=np.float64) if corrected else None
        for row, cands in enumerate(candidates):
            slots[row, : sizes[row]] = [c.slot for c in cands]
            costs[row, : sizes[row]] = [c.cost_usd for c in cands]
            as_trained[row, : sizes[row]] = [c.priced_as_trained for c in cands]
            if corrected:
                p_offsets[row, : sizes[row]] = [c.p_offset for c in cands]
        p = np.take_along_axis(p_all, slots, axis=1)
        p_routed = p + p_offsets.astype(p.dtype) if corrected else p
        boost = self.network.boost[slots]
        s = routing_scores(p_routed, mu, boost, self.network.gamma, self.costs.normalize(costs))
        valid = np.arange(width)[None, :] < np.array(sizes)[:, None]
        best_all = np.where(valid, s, -np.inf).argmax(axis=1)
        # A non-policy operating point picks among the same live candidates (NO_CHOICE: the policy's pick);
        # a single-model or cluster pick priced far above training gives way to a no dearer, no worse one.
        rules = [rule for _, rule in points]
        if self.manifest.p_calibration is not None:  # calibrated in slot order, then gathered per candidate like p
            p = np.take_along_axis(self.manifest.calibrated_p(p_all), slots, axis=1)
        applied = None
        if corrected:  # the p the controller and the log see, and what clipping to [0, 1] kept of each c
            shown = np.clip(p + p_offsets, 0.0, 1.0)
            applied, p = (shown - p).tolist(), shown
        picked, repriced_from = rule_picks(rules, p_routed, boost, slots, costs, valid, embeddings, self.taus.centroids,
                                           as_trained, p)
        best_all = np.where(picked != NO_CHOICE, picked, best_all).tolist()
        repriced_from = repriced_from.tolist()
        p_rows, s_rows, mu_rows = p.tolist(), s.tolist(), mu.tolist()
        decisions = []
        for row, cands in enumerate(candidates):
            best, n = best_all[row], sizes[row]
            tau_eff, clamped = effective[row]
            decisions.append(
                Decision(
                    index=best,
                    slot=cands[best].slot,
                    model=self.models[cands[best].slot],
                    mu=mu_rows[row],
                    tau_requested=float(taus[row]),
                    tau_effective=tau_eff,
                    clamped=clamped,
                    p=tuple(p_rows[row][:n]),
                    scores=tuple(s_rows[row][:n]),
                    policy_tau=policy_taus[row],
                    delta=offsets[row],
                    rule=rules[row].label() if picked[row] != NO_CHOICE else "policy",
                    repriced_from=None if repriced_from[row] == NO_CHOICE else self.models[cands[repriced_from[row]].slot],
                    p_correction=() if applied is None else tuple(applied[row][:n]),
                )
            )
        return decisions
