"""``TrainConfig``: every hyper-parameter of ``proteus train`` (each one a flag of the same name)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields

from litellm_proteus.costs import SPACES as COST_SPACES
from litellm_proteus.encoder import DEFAULT_ENCODER, TRUNCATIONS

DEFAULT_CACHE_DIR = os.environ.get("PROTEUS_CACHE_DIR", os.path.expanduser("~/.cache/proteus"))


@dataclass
class TrainConfig:
    # data
    data: list[str] = field(default_factory=list)
    format: str = "auto"
    prices: str | None = None  # JSON/YAML price table (USD per 1M tokens) for logs without costs
    skip_contaminated: bool = False  # RouteLLM: drop prompts listed in contaminated_prompts.jsonl
    seed: int = 0
    # warm start: an artifact directory whose encoder, slots, weights and tau training range are kept
    init: str | None = None
    # bandit feedback (decision logs): "ips" weights the performance head's loss by min(1/propensity,
    # propensity_clip), self-normalised; "none" (default) leaves it unweighted.  Measured on a simulated
    # RouterBench-partial log (docs/learn-from-traffic.md): unweighted held-out BCE 0.563 vs 0.619, mean
    # |predicted - observed| accuracy per model 1.6 pp vs 6.7 pp -- the clipped weights of the few explored
    # rows add more variance than they remove bias.  Propensities still drive the DR calibration.
    propensity_weighting: str = "none"
    propensity_clip: float = 20.0
    # encoder
    encoder: str = DEFAULT_ENCODER
    max_tokens: int = 256
    truncation: str = "tail"
    device: str = "auto"
    cache_dir: str | None = DEFAULT_CACHE_DIR
    # Route on a static token table distilled from `encoder` (train/distill.py; bundled in the
    # artifact) instead of running the transformer per request: same routing quality measured on
    # RouterBench-partial and MMLU, ~1 ms instead of ~15 ms per decision on 2 CPU cores.
    # --no-static-encoder keeps the transformer; --finetune-encoder implies it.
    static_encoder: bool = True
    finetune_encoder: bool = False
    encoder_lr: float = 2e-5
    finetune_epochs: int = 2
    # costs: "usd_per_call" (linear, paper) or "log10_usd_per_call" (see litellm_proteus/costs.py)
    cost_space: str = "usd_per_call"
    # architecture
    hidden_dim: int = 256
    use_critic: bool = True
    fixed_gamma: float | None = None
    use_lambda: bool = True
    selection_temperature: float = 0.05
    # performance head (supervised, masked BCE)
    perf_epochs: int = 80
    perf_lr: float = 1e-3
    perf_weight_decay: float = 1e-2
    perf_batch_size: int = 64
    perf_patience: int = 10
    oof_folds: int = 5
    # PPO
    steps: int = 3_000
    batch_size: int = 32
    lr: float = 3e-4
    weight_decay: float = 1e-2
    max_grad_norm: float = 1.0
    ppo_epochs: int = 4
    clip_eps: float = 0.2
    entropy_coef: float = 1e-2
    value_coef: float = 0.5
    scoring_coef: float = 1.0
    scoring_lr: float = 3e-3
    boost_steps: int = 300
    session_batches: int = 10
    group_size: int = 8
    # Lagrangian dual
    dual_lr: float = 0.4
    dual_every: int = 5
    lambda_init: float = 5.0
    lambda_bins: int = 5
    lambda_max: float = 20.0
    # tau range: None = derived from the data (see derive_tau_range)
    tau_range: tuple[float, float] | None = None
    tau_below_best: float = 0.10
    # validation calibration
    calibrate: bool = True
    calibration_margin: float = 0.005
    calibration_step: float = 0.0025
    calibration_extrapolate: float = 0.6
    calibration_val_slack: float = 0.0
    calibration_z: float = 1.2816
    # mix the two cost-frontier operating points around each tau per query (TauCalibration.frontier_*)
    mix_operating_points: bool = True
    log_every: int = 500
    progress: bool = True

    def __post_init__(self) -> None:
        """Reject values no run can use, naming the flag (``--steps 0`` must not fail mid-training)."""
        problems = []
        for f in fields(self):
            value, flag = getattr(self, f.name), "--" + f.name.replace("_", "-")
            if isinstance(value, bool) or value is None or f.name == "seed":
                continue
            if isinstance(value, int):
                least = _INT_AT_LEAST.get(f.name, 1)
                if value < least:
                    problems.append(f"{flag} must be an integer >= {least}; got {value}")
            elif isinstance(value, float):
                positive = f.name in _FLOAT_POSITIVE
                if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
                    problems.append(f"{flag} must be a number {'> 0' if positive else '>= 0'}; got {value}")
        if self.truncation not in TRUNCATIONS:
            problems.append(f"--truncation must be one of {list(TRUNCATIONS)}; got {self.truncation!r}")
        if self.propensity_weighting not in PROPENSITY_WEIGHTINGS:
            problems.append(f"--propensity-weighting must be one of {list(PROPENSITY_WEIGHTINGS)}; got {self.propensity_weighting!r}")
        if self.cost_space not in COST_SPACES:
            problems.append(f"--cost-space must be one of {list(COST_SPACES)}; got {self.cost_space!r}")
        if problems:
            raise ValueError("; ".join(problems))


PROPENSITY_WEIGHTINGS = ("ips", "none")

_INT_AT_LEAST = {"max_tokens": 8, "oof_folds": 2, "boost_steps": 0, "finetune_epochs": 0}


_FLOAT_POSITIVE = {"encoder_lr", "perf_lr", "lr", "scoring_lr", "max_grad_norm", "clip_eps", "selection_temperature",
                   "lambda_max", "tau_below_best", "calibration_step", "fixed_gamma", "propensity_clip"}
