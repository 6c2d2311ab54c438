"""Everything ``evaluate`` needs, rebuilt from an artifact: its data, its splits, the embeddings.

The artifact's manifest records where its training data came from (``manifest.data``: paths,
content hash, split method and seed).  We re-read those paths (``--data`` overrides them), re-assign
the splits with the recorded seed exactly as the trainer did, warn when the content hash, the split
method or the split sizes differ from the record, and embed every prompt with the artifact's encoder
(through the on-disk embedding cache the trainer filled, so this is usually free).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from litellm_proteus.artifact import ArtifactError, EncoderSpec, Manifest, load_artifact
from litellm_proteus.model import ProteusModel
from litellm_proteus.predictor import mixing_draw

from ..data.logs import RoutingLog
from ..routing import fill_missing_costs
from .baselines import Split

DEFAULT_CACHE_DIR = os.environ.get("PROTEUS_CACHE_DIR", os.path.expanduser("~/.cache/proteus"))


class EvalInputWarning(UserWarning):
    """The evaluation data differs from what the artifact recorded (hash, split method, sizes)."""


@dataclass
class EvalInputs:
    model: ProteusModel
    manifest: Manifest
    artifact_dir: Path
    log: RoutingLog  # columns in manifest.models order, splits assigned
    embeddings: np.ndarray  # [N, D], rows of ``log``
    dataset: str
    train: Split
    val: Split
    test: Split
    test_rows: np.ndarray  # row indices of ``log`` in ``test``
    n_test_excluded: int
    encoder: object | None = None
    notes: list[str] = field(default_factory=list)


def _warn(notes: list[str], message: str) -> None:
    notes.append(message)
    warnings.warn(message, EvalInputWarning, stacklevel=3)


def reorder_models(log: RoutingLog, models: list[str], notes: list[str]) -> RoutingLog:
    """The log's columns in the artifact's slot order (extra models dropped, missing ones an error)."""
    missing = [m for m in models if m not in log.models]
    if missing:
        raise ValueError(
            f"the evaluation data lacks models the artifact routes to: {missing} "
            f"(data has {log.models}; manifest.models = {models})"
        )
    extra = [m for m in log.models if m not in models]
    if extra:
        _warn(notes, f"ignoring {len(extra)} model(s) in the data that the artifact does not know: {extra}")
    order = [log.models.index(m) for m in models]
    if order == list(range(len(log.models))):
        return log
    return replace(
        log,
        models=list(models),
        scores=log.scores[:, order],
        costs=log.costs[:, order],
        output_tokens=None if log.output_tokens is None else np.asarray(log.output_tokens)[:, order],
    )


def load_split_log(manifest: Manifest, data: list[str] | None, data_format: str | None, notes: list[str]) -> RoutingLog:
    """Re-read the data, re-assign the recorded splits, check them against the record."""
    from ..data import assign_splits, load_logs
    from ..data.decision_log import FORMAT as DECISION_LOG_FORMAT

    record = manifest.data
    paths = list(data) if data else list(record.paths)
    if not paths:
        raise ValueError("the artifact records no data paths (manifest.data.paths is empty): pass --data PATH")
    absent = [p for p in paths if not Path(p).exists()]
    if absent:
        where = "--data" if data else "manifest.data.paths"
        raise FileNotFoundError(f"evaluation data not found: {absent} (from {where}); pass --data PATH to point at it")
    config = manifest.training.get("config", {}) if isinstance(manifest.training, dict) else {}
    fmt = data_format or config.get("format") or "auto"
    seed = record.split_seed if record.split_seed is not None else int(config.get("seed", 0))
    extra = record.model_extra or {}
    log = load_logs(paths, format=fmt, seed=seed, prices=extra.get("prices"),
                    skip_contaminated=bool(extra.get("skip_contaminated", False)))
    if log.source == DECISION_LOG_FORMAT:
        # one outcome per request and no held-out split: a test split carved from it would hold
        # rows the artifact trained on, and every other routing's outcome is unknown there
        raise ValueError(
            f"{paths[0]}: a decision log is not full-information test data; estimate the artifact on traffic "
            "it never trained on with: proteus eval --artifact ARTIFACT --log LATER_DECISION_LOG "
            "(off-policy, docs/learn-from-traffic.md)"
        )
    if record.sha256 and record.sha256 not in (log.sha256, log.content_hash()):
        _warn(notes, f"the evaluation data's hash differs from the artifact's manifest.data.sha256 ({record.sha256[:12]}...): "
              "the test split may overlap the rows the artifact was trained on")
    log = assign_splits(log, seed=seed)
    if record.split_method and log.split_method != record.split_method:
        _warn(notes, f"split method {log.split_method!r} differs from the artifact's {record.split_method!r}")
    sizes = {name: int(np.sum(log.split == name)) for name in ("train", "val", "test")}
    if record.split and {k: int(v) for k, v in record.split.items()} != sizes:
        _warn(notes, f"split sizes {sizes} differ from the artifact's {dict(record.split)}")
    return reorder_models(log, list(manifest.models), notes)


def dataset_name(manifest: Manifest, paths: list[str]) -> str:
    """What the data is called: a folder's name; files' shared folder (a dataset's split files,
    ``train.csv val.csv test.csv``), or one file's stem; else the stems joined with ``+``.
    ``--dataset`` overrides."""
    if not paths:
        return manifest.data.source or "unknown"
    found = [Path(path) for path in paths]
    if len(found) == 1:
        return found[0].name if found[0].is_dir() else found[0].stem
    parents = {p.resolve().parent for p in found if not p.is_dir()}
    if len(parents) == 1 and all(not p.is_dir() for p in found):
        return parents.pop().name
    return "+".join(p.name if p.is_dir() else p.stem for p in found)


def artifact_encoder(spec: EncoderSpec, artifact_dir: Path, cache_dir: str | None, device: str, precision: str = "auto"):
    """The artifact's encoder as the proxy runs it: ``backend="auto"`` (equal to the training
    backend to ~1e-5, same disk cache) and ``precision`` (``auto`` = the proxy's default: bf16 on
    CPUs with native bf16, so routing is evaluated on the embeddings it will see)."""
    from litellm_proteus.encoder import open_encoder

    encoder = open_encoder(
        spec.resolve(artifact_dir),
        device=device,
        max_tokens=spec.max_tokens,
        truncation=spec.truncation,  # type: ignore[arg-type]
        cache_dir=os.path.join(cache_dir, "embeddings") if cache_dir else None,
        backend="auto",
        precision=precision,
    )
    if encoder.embed_dim != spec.embed_dim:
        raise ArtifactError(f"encoder {spec.name!r} gives {encoder.embed_dim}-d embeddings; manifest.encoder.embed_dim = {spec.embed_dim}")
    return encoder


def build_splits(log: RoutingLog, embeddings: np.ndarray) -> tuple[Split, Split, Split, np.ndarray, int]:
    """Train keeps rows with unobserved outcomes (masked by the predictors); val and test keep only
    fully observed rows (accuracy of every routing, the oracle and the limit need all outcomes)."""
    costs = fill_missing_costs(log.costs)
    full = np.isfinite(log.scores).all(axis=1)
    train_rows = np.flatnonzero(log.split == "train")
    val_rows = np.flatnonzero((log.split == "val") & full)
    test_all = np.flatnonzero(log.split == "test")
    test_rows = test_all[full[test_all]]
    draws = np.array([mixing_draw(prompt) for prompt in log.prompts])  # as the proxy draws them
    prompts = np.asarray(log.prompts, dtype=object)
    make = lambda rows: Split(embeddings[rows], log.scores[rows], costs[rows], draws[rows], prompts[rows])  # noqa: E731
    return make(train_rows), make(val_rows), make(test_rows), test_rows, int(len(test_all) - len(test_rows))


def load_inputs(
    artifact: str | os.PathLike,
    *,
    data: list[str] | None = None,
    data_format: str | None = None,
    cache_dir: str | None = DEFAULT_CACHE_DIR,
    device: str = "auto",
    precision: str = "auto",
    progress: bool = True,
    dataset: str | None = None,
) -> EvalInputs:
    artifact_dir = Path(artifact)
    model, manifest = load_artifact(artifact_dir)
    notes: list[str] = []
    log = load_split_log(manifest, data, data_format, notes)
    encoder = artifact_encoder(manifest.encoder, artifact_dir, cache_dir, device, precision)
    embeddings = encoder.encode(log.prompts, progress=progress)
    train, val, test, test_rows, excluded = build_splits(log, embeddings)
    if len(train) < 5 or len(val) < 2 or len(test) < 2:
        raise ValueError(f"too little data to evaluate: train {len(train)}, val {len(val)}, test {len(test)} usable rows")
    return EvalInputs(
        model=model,
        manifest=manifest,
        artifact_dir=artifact_dir,
        log=log,
        embeddings=embeddings,
        dataset=dataset or dataset_name(manifest, list(data) if data else list(manifest.data.paths)),
        train=train,
        val=val,
        test=test,
        test_rows=test_rows,
        n_test_excluded=excluded,
        encoder=encoder,
        notes=notes,
    )


def measure_encoder_ms(encoder, prompts: list[str], batch: int = 8, n: int = 64) -> float:
    """Per-query time (ms) of ``encoder.encode`` on real prompts in batches of ``batch``: the path a
    request takes in the proxy (tokenise, forward, pool).  Pass an encoder built without caches
    (``artifact_encoder(..., cache_dir=None, ...)``), or every call would be a cache hit."""
    import torch

    if getattr(encoder, "cache", None) is not None or getattr(encoder, "memory", None) is not None:
        raise ValueError("measure the encoder's latency on an encoder without embedding caches")
    prompts = list(prompts[:n]) or ["routing latency probe"]
    cuda = str(getattr(encoder, "device", "cpu")).startswith("cuda")
    encoder.encode(prompts[:batch])  # warm-up
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for s in range(0, len(prompts), batch):
        encoder.encode(prompts[s : s + batch])  # returns numpy: the device work is finished
    return (time.perf_counter() - start) * 1000.0 / len(prompts)
