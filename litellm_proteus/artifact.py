"""The trained-router artifact: ``DIR/model.safetensors`` + ``DIR/manifest.json``.

The manifest says everything needed to use the weights correctly and to know where they came from:
model names in slot order, encoder identity and embedding size, the tau range, cost normalisation
bounds, per-slot average token counts (to estimate a request's cost from live prices), the tau
calibration table, the training configuration, and the data (paths, content hash, split).
Loading checks all of it and fails with a message naming the field at fault.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from . import __version__
from .costs import CostNormalizer
from .model_config import ModelConfig, tensor_shapes
from .operating_points import OperatingPoint

FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
MANIFEST_FILE = "manifest.json"
DEFAULT_ARTIFACT_DIR = Path(__file__).resolve().parent / "default_artifact"


class ArtifactError(ValueError):
    """An artifact that cannot be used as is; the message names the file and field."""


class EncoderSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    embed_dim: int = Field(gt=0)
    max_tokens: int = Field(256, ge=8)
    truncation: str = "tail"
    pooling: Literal["mean-l2"] = "mean-l2"  # the one pooling the encoders implement
    bundled: bool = Field(
        False,
        description="weights ship with the artifact (fine-tuned or static): name is a folder relative to the "
        "artifact, usually a sub-folder; '../' reaches a folder several artifacts share (one copy of a token table)",
    )
    static_from: str | None = Field(None, description="static token table distilled from this encoder (proteus distill-static)")
    files_sha256: dict[str, str] = Field(
        default_factory=dict,
        description="bundled encoder: file (relative to the folder) -> SHA-256, checked when the artifact loads",
    )

    @model_validator(mode="after")
    def _relative_when_bundled(self) -> "EncoderSpec":
        if self.bundled and (Path(self.name).is_absolute() or not self.name.strip()):
            raise ValueError(f"encoder.name of a bundled encoder must be a folder relative to the artifact; got {self.name!r}")
        return self

    def resolve(self, artifact_dir: str | os.PathLike) -> str:
        """The name/path to load the encoder from."""
        return str(Path(artifact_dir) / self.name) if self.bundled else self.name


class TauCalibration(BaseModel):
    """Requested tau -> tau fed to the policy, fit on validation (see ``train/ppo.py: calibrate``).

    ``requested`` and ``policy_tau`` are increasing and equally long: the smallest policy tau whose
    validation accuracy reaches requested + ``margin``; between points we interpolate.  Empty lists
    mean identity.

    ``frontier_*`` (optional) are the policy taus on the upper concave hull of validation
    (cost, accuracy): the cheapest way to reach an accuracy between two of them is to route a share
    of queries at each (a randomised operating point, as in constrained MDPs).  The runtime does so
    when it is given a per-query draw u in [0, 1) (``predictor.mixing_draw``: a hash of the prompt).

    ``requested_point`` / ``frontier_point`` (optional, parallel to ``requested`` / the frontier):
    the rule each entry routes by (``operating_points.OperatingPoint``); the entry's policy tau is
    then the policy point a rule falls back to when its slot has no live candidate.  Empty lists
    mean every entry is the policy.  ``centroids``: the cluster rules' k-means centroids of the
    encoder embedding.

    ``requested_p_ref`` / ``frontier_p_ref`` (optional, parallel to ``requested`` / the frontier):
    the mean calibrated p of the chosen deployments when the validation split is routed at that
    entry -- the predicted quality static calibration validated, which the compliance controller
    steers to without labels (``TauMapper.reference_p``).  Empty: the controller's own margin.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # NaN passes every order check
    requested: list[float] = Field(default_factory=list)
    policy_tau: list[float] = Field(default_factory=list)
    margin: float = 0.0
    frontier_policy_tau: list[float] = Field(default_factory=list, description="hull points, cheapest first")
    frontier_accuracy: list[float] = Field(default_factory=list, description="their validation accuracy, increasing")
    frontier_cost_usd: list[float] = Field(default_factory=list, description="their mean logged cost per query")
    requested_point: list[OperatingPoint] = Field(default_factory=list, description="rule per requested tau (empty: policy)")
    frontier_point: list[OperatingPoint] = Field(default_factory=list, description="rule per hull point (empty: policy)")
    centroids: list[list[float]] = Field(default_factory=list, description="k-means centroids of the cluster rules")
    requested_p_ref: list[float] = Field(default_factory=list, description="validated mean calibrated p per requested tau")
    frontier_p_ref: list[float] = Field(default_factory=list, description="validated mean calibrated p per hull point")

    @model_validator(mode="after")
    def _check(self) -> "TauCalibration":
        if len(self.requested) != len(self.policy_tau):
            raise ValueError("calibration.requested and calibration.policy_tau must have equal length")
        if any(b < a for a, b in zip(self.requested, self.requested[1:])):
            raise ValueError("calibration.requested must be non-decreasing")
        n = len(self.frontier_policy_tau)
        if len(self.frontier_accuracy) != n or len(self.frontier_cost_usd) != n:
            raise ValueError("calibration.frontier_policy_tau, frontier_accuracy and frontier_cost_usd must have equal length")
        if any(b <= a for a, b in zip(self.frontier_accuracy, self.frontier_accuracy[1:])):
            raise ValueError("calibration.frontier_accuracy must be strictly increasing")
        if self.requested_point and len(self.requested_point) != len(self.requested):
            raise ValueError("calibration.requested_point must be empty or as long as calibration.requested")
        if self.frontier_point and len(self.frontier_point) != n:
            raise ValueError("calibration.frontier_point must be empty or as long as calibration.frontier_policy_tau")
        if self.requested_p_ref and len(self.requested_p_ref) != len(self.requested):
            raise ValueError("calibration.requested_p_ref must be empty or as long as calibration.requested")
        if self.frontier_p_ref and len(self.frontier_p_ref) != n:
            raise ValueError("calibration.frontier_p_ref must be empty or as long as calibration.frontier_policy_tau")
        points = self.requested_point + self.frontier_point
        n_clusters = len(self.centroids)
        for point in points:
            if point.kind == "cluster" and len(point.cluster_slots) != n_clusters:
                raise ValueError(f"calibration: a cluster rule names {len(point.cluster_slots)} slots for {n_clusters} centroids")
        return self


class SlotCalibration(BaseModel):
    """One slot's map raw p -> calibrated p: isotonic (piecewise-linear through the fitted blocks'
    (mean raw p, mean outcome), flat beyond the ends), Platt (sigmoid(a * logit(p) + b)) or identity."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # NaN passes every order check
    method: Literal["isotonic", "platt", "identity"]
    x: list[float] = Field(default_factory=list, description="isotonic: raw p knots, increasing")
    y: list[float] = Field(default_factory=list, description="isotonic: calibrated p at the knots, non-decreasing")
    a: float = 1.0
    b: float = 0.0

    @model_validator(mode="after")
    def _check(self) -> "SlotCalibration":
        if self.method == "isotonic":
            if len(self.x) != len(self.y) or not self.x:
                raise ValueError("isotonic calibration needs equally long, non-empty x and y")
            if any(b < a for a, b in zip(self.x, self.x[1:])) or any(b < a for a, b in zip(self.y, self.y[1:])):
                raise ValueError("isotonic calibration x and y must be non-decreasing")
            if not all(0.0 <= v <= 1.0 for v in self.y):  # a calibrated p is a probability
                raise ValueError(f"isotonic calibration y must lie in [0, 1]; got {min(self.y)}..{max(self.y)}")
        return self

    @cached_property
    def _knots(self) -> tuple[np.ndarray, np.ndarray]:
        # np.interp converts list knots on every call: a tenth of a batch-1 decision's numpy time
        return np.asarray(self.x, dtype=np.float64), np.asarray(self.y, dtype=np.float64)

    def apply(self, p: np.ndarray) -> np.ndarray:
        if self.method == "isotonic":
            return np.interp(p, *self._knots)
        if self.method == "platt":
            clipped = np.clip(p, 1e-6, 1 - 1e-6)
            z = self.a * np.log(clipped / (1 - clipped)) + self.b
            return 1.0 / (1.0 + np.exp(-np.clip(z, -700.0, 700.0)))  # exp(700) is finite: same values, no overflow
        return np.asarray(p, dtype=np.float64)


class PCalibration(BaseModel):
    """Per-slot calibration of the performance head's p_i(x), fit in training (``train/p_calibration.py``).
    Routing scores keep the raw p; decisions report, and the compliance controller uses, calibrated p."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # NaN passes every order check
    slots: list[SlotCalibration]
    fitted_on: str = Field("", description="which rows it was fit on")
    metrics: dict[str, Any] = Field(default_factory=dict, description="ECE / log-loss before and after")

    def apply(self, p: np.ndarray) -> np.ndarray:
        """[N, K] raw p (columns in slot order) -> calibrated p."""
        p = np.asarray(p, dtype=np.float64)
        return np.stack([cal.apply(p[:, k]) for k, cal in enumerate(self.slots)], axis=1) if len(p) else p


class DataRecord(BaseModel):
    model_config = ConfigDict(extra="allow")
    paths: list[str] = Field(default_factory=list)
    sha256: str = ""
    source: str = ""
    n_rows: int = 0
    split: dict[str, int] = Field(default_factory=dict)  # rows per split
    split_method: str = ""
    split_seed: int | None = None


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # NaN passes every order check

    format_version: int = FORMAT_VERSION
    package_version: str = __version__
    models: list[str] = Field(min_length=2, description="trained model slots, in head order")
    encoder: EncoderSpec
    architecture: ModelConfig
    tau_range: tuple[float, float] = Field(description="declared tau range [lo, hi]")
    tau_train_range: tuple[float, float] = Field(description="tau range sampled in training; tau_norm uses it")
    cost_normalization: dict[str, Any]
    avg_input_tokens: dict[str, float] = Field(default_factory=dict)
    avg_output_tokens: dict[str, float] = Field(default_factory=dict)
    avg_cost_usd: dict[str, float] = Field(
        default_factory=dict,
        description="each slot's mean cost per request on the training rows, for slots whose output tokens were "
        "measured: the prices the fixed operating points were chosen at (engine.py compares live prices with them)",
    )
    calibration: TauCalibration = Field(default_factory=TauCalibration)
    p_calibration: PCalibration | None = Field(None, description="per-slot p calibration; absent: raw p")
    training: dict[str, Any] = Field(default_factory=dict)
    data: DataRecord = Field(default_factory=DataRecord)
    metrics: dict[str, Any] = Field(default_factory=dict)
    weights_sha256: str = ""

    @model_validator(mode="after")
    def _check(self) -> "Manifest":
        if len(set(self.models)) != len(self.models):
            raise ValueError("models: slot names must be unique")
        if self.architecture.n_models != len(self.models):
            raise ValueError(
                f"architecture.n_models={self.architecture.n_models} but models lists {len(self.models)} slots"
            )
        if self.architecture.embed_dim != self.encoder.embed_dim:
            raise ValueError(
                f"architecture.embed_dim={self.architecture.embed_dim} != encoder.embed_dim={self.encoder.embed_dim}"
            )
        averages = (self.avg_input_tokens, self.avg_output_tokens, self.avg_cost_usd)
        negative = sorted(m for values in averages for m, v in values.items() if v < 0)
        if negative:
            raise ValueError(f"avg_input_tokens / avg_output_tokens / avg_cost_usd must be >= 0; negative for {negative}")
        unknown = sorted({m for values in averages for m in values} - set(self.models))
        if unknown:  # the engine's fallback averages over these maps: a stray entry would skew it
            raise ValueError(f"avg_input_tokens / avg_output_tokens / avg_cost_usd name models that are no slot: {unknown}")
        for name, (lo, hi) in (("tau_range", self.tau_range), ("tau_train_range", self.tau_train_range)):
            if not (0.0 < lo < hi <= 1.0):
                raise ValueError(f"{name} must satisfy 0 < lo < hi <= 1; got [{lo}, {hi}]")
        CostNormalizer.from_dict(self.cost_normalization)
        if self.p_calibration is not None and len(self.p_calibration.slots) != len(self.models):
            raise ValueError(
                f"p_calibration.slots has {len(self.p_calibration.slots)} entries for {len(self.models)} model slots"
            )
        cal = self.calibration
        for point in cal.requested_point + cal.frontier_point:
            named = [point.slot] if point.slot is not None else point.cluster_slots
            if any(not 0 <= s < len(self.models) for s in named):
                raise ValueError(f"calibration: operating point {point.label()} names a slot outside 0..{len(self.models) - 1}")
        if cal.centroids and any(len(c) != self.encoder.embed_dim for c in cal.centroids):
            raise ValueError(f"calibration.centroids must have encoder.embed_dim={self.encoder.embed_dim} columns")
        return self

    def calibrated_p(self, p: np.ndarray) -> np.ndarray:
        """[N, K] raw p -> calibrated p (unchanged without ``p_calibration``)."""
        return np.asarray(p, dtype=np.float64) if self.p_calibration is None else self.p_calibration.apply(p)

    @property
    def cost_normalizer(self) -> CostNormalizer:
        return CostNormalizer.from_dict(self.cost_normalization)

    def tau_norm(self, tau_policy: float) -> float:
        lo, hi = self.tau_train_range
        return (tau_policy - lo) / (hi - lo)


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def encoder_files_sha256(folder: str | os.PathLike) -> dict[str, str]:
    """file (POSIX path relative to ``folder``) -> SHA-256, for every file below it."""
    root = Path(folder)
    return {p.relative_to(root).as_posix(): file_sha256(p) for p in sorted(root.rglob("*")) if p.is_file()}


def verify_bundled_encoder(directory: str | os.PathLike, manifest: Manifest) -> None:
    """A bundled encoder must hold exactly the bytes the manifest recorded: a missing tokenizer file
    would otherwise load as a stub vocabulary and route every prompt alike, silently."""
    spec = manifest.encoder
    if not spec.bundled:
        return
    folder = Path(directory) / spec.name
    if not folder.is_dir():
        raise ArtifactError(f"artifact {str(directory)!r}: bundled encoder folder {spec.name!r} is missing")
    for name, expected in spec.files_sha256.items():
        path = folder / name
        if not path.is_file():
            raise ArtifactError(f"{path}: missing (listed in manifest encoder.files_sha256)")
        if file_sha256(path) != expected:
            raise ArtifactError(f"{path}: content hash does not match manifest encoder.files_sha256 (corrupt or replaced)")


def save_shared_safetensors(tensors: dict, path: str | os.PathLike, metadata: dict[str, str]) -> None:
    """``safetensors`` writes files 0600; an artifact is meant to be read by a proxy running as
    another user, so every tensor file of an artifact is written 0644.  The file is written beside
    ``path`` and renamed over it: a proxy that memory-maps the old file (the static token table)
    keeps reading the old bytes instead of a file truncated under it."""
    from safetensors.torch import save_file

    path = Path(path)
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        save_file(tensors, str(partial), metadata=metadata)
        partial.chmod(0o644)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def save_artifact(directory: str | os.PathLike, model, manifest: Manifest) -> Path:
    """Write weights then the manifest (with the weights' hash, and the bundled encoder's file hashes
    when its folder is already in place) into ``directory``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    check_finite(out / WEIGHTS_FILE, {k: v.float().numpy() for k, v in tensors.items()})  # never written
    # One metadata key: safetensors writes metadata in hash-map order, and with two keys identical
    # weights got different bytes (and weights_sha256) from run to run.
    save_shared_safetensors(tensors, out / WEIGHTS_FILE, {"format": f"proteus-v{FORMAT_VERSION}"})
    manifest = manifest.model_copy(update={"weights_sha256": file_sha256(out / WEIGHTS_FILE)})
    if manifest.encoder.bundled and (out / manifest.encoder.name).is_dir():
        encoder = manifest.encoder.model_copy(update={"files_sha256": encoder_files_sha256(out / manifest.encoder.name)})
        manifest = manifest.model_copy(update={"encoder": encoder})
    (out / MANIFEST_FILE).write_text(json.dumps(manifest.model_dump(mode="json"), indent=2) + "\n")
    return out


def read_manifest(directory: str | os.PathLike) -> Manifest:
    path = Path(directory) / MANIFEST_FILE
    if Path(directory).exists() and not Path(directory).is_dir():
        raise ArtifactError(
            f"artifact {str(directory)!r} is a file, not a directory: name the directory that holds "
            f"{MANIFEST_FILE} and {WEIGHTS_FILE}"
        )
    if not Path(directory).is_dir():
        raise ArtifactError(f"artifact directory {str(directory)!r} does not exist")
    if not path.is_file():
        raise ArtifactError(f"artifact {str(directory)!r} has no {MANIFEST_FILE}")
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise ArtifactError(f"{path}: expected a JSON object")
    version = raw.get("format_version")
    if version != FORMAT_VERSION:
        raise ArtifactError(f"{path}: format_version {version!r} is not supported (this package reads {FORMAT_VERSION})")
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'manifest'}: {e['msg']}" for e in exc.errors())
        raise ArtifactError(f"{path}: invalid manifest: {problems}") from exc


def open_artifact(
    directory: str | os.PathLike = DEFAULT_ARTIFACT_DIR,
    *,
    expected_models: list[str] | None = None,
    expected_encoder: str | None = None,
) -> tuple[Manifest, Path]:
    """(manifest, weights file) after every check that needs no tensor library: manifest, weights
    hash, bundled encoder hashes and optional expectations."""
    manifest = read_manifest(directory)
    weights = Path(directory) / WEIGHTS_FILE
    if not weights.is_file():
        raise ArtifactError(f"artifact {str(directory)!r} has no {WEIGHTS_FILE}")
    if manifest.weights_sha256 and file_sha256(weights) != manifest.weights_sha256:
        raise ArtifactError(f"{weights}: content hash does not match manifest.weights_sha256 (corrupt or replaced)")
    verify_bundled_encoder(directory, manifest)
    if expected_models is not None and list(expected_models) != manifest.models:
        raise ArtifactError(f"{directory}: models {manifest.models} != expected {list(expected_models)}")
    if expected_encoder is not None and expected_encoder != manifest.encoder.name:
        raise ArtifactError(f"{directory}: encoder {manifest.encoder.name!r} != expected {expected_encoder!r}")
    return manifest, weights


def check_tensor_shapes(weights: Path, shapes: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]]) -> None:
    """The weights file holds exactly the tensors ``manifest.architecture`` implies, shape for shape."""
    missing = sorted(set(expected) - set(shapes))
    extra = sorted(set(shapes) - set(expected))
    if missing or extra:
        raise ArtifactError(f"{weights}: tensors do not match manifest.architecture (missing {missing}, unexpected {extra})")
    for key, shape in expected.items():
        if tuple(shapes[key]) != tuple(shape):
            raise ArtifactError(
                f"{weights}: tensor {key} has shape {tuple(shapes[key])}, manifest.architecture implies {tuple(shape)}"
            )


def check_finite(weights: Path | str, tensors: dict[str, Any]) -> None:
    """Every weight is a finite number: a NaN weight passes every shape check and makes every score
    NaN, so each decision would route by an argmax over NaN."""
    bad = sorted(k for k, v in tensors.items() if not bool(np.isfinite(np.asarray(v, dtype=np.float64)).all()))
    if bad:
        raise ArtifactError(f"{weights}: tensors {bad} hold NaN or infinite values")


def load_artifact_arrays(directory: str | os.PathLike = DEFAULT_ARTIFACT_DIR, **expected) -> tuple[dict, Manifest]:
    """Load (name -> float32 numpy array, manifest) without torch: what the numpy runtime runs."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    manifest, weights = open_artifact(directory, **expected)
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ArtifactError(f"{weights}: unreadable weights ({exc})") from exc
    check_tensor_shapes(weights, {k: v.shape for k, v in state.items()}, tensor_shapes(manifest.architecture))
    check_finite(weights, state)
    return state, manifest


def load_artifact(
    directory: str | os.PathLike = DEFAULT_ARTIFACT_DIR,
    *,
    expected_models: list[str] | None = None,
    expected_encoder: str | None = None,
    map_location: str = "cpu",
):
    """Load (model, manifest), checking hash, tensor names/shapes and optional expectations."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from .model import ProteusModel

    manifest, weights = open_artifact(directory, expected_models=expected_models, expected_encoder=expected_encoder)
    try:
        state = load_file(str(weights), device=map_location)
    except (SafetensorError, OSError, ValueError) as exc:
        raise ArtifactError(f"{weights}: unreadable weights ({exc})") from exc
    model = ProteusModel(manifest.architecture)
    check_tensor_shapes(
        weights, {k: tuple(v.shape) for k, v in state.items()}, {k: tuple(v.shape) for k, v in model.state_dict().items()}
    )
    check_finite(weights, {k: v.float().cpu().numpy() for k, v in state.items()})
    model.load_state_dict(state)
    model.eval()
    return model, manifest
