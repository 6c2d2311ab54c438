"""``proteus distill-static``: turn a transformer encoder into a static token table.

For every token id t of the encoder's vocabulary, the transformer runs once on ``[CLS] t [SEP]``
(the tokenizer's own special tokens) and the hidden state at t's position becomes t's vector.  The
folder written holds that table (``static_embeddings.safetensors``, fp16 to halve the size; loaded
as fp32) and the tokenizer; ``open_encoder`` treats such a folder as an encoder whose prompt
embedding is the mean of its kept tokens' vectors (see ``litellm_proteus/encoder.py``).

Choices, measured on RouterBench-partial with the performance head alone (same splits, same head,
validation/test mean AUC over the 11 models): MiniLM itself 0.660/0.655; this table with plain
means 0.652/0.662; with SIF weights a / (a + p(token)) at a = 1e-3 0.654/0.659 and at 1e-4
0.644/0.652; so no weighting and no PCA (the Model2Vec recipe adds both).  Model2Vec's own
distiller is not used: its ``distill`` extra pins ``transformers<5.4``, older than this project's.
A MiniLM vocabulary (30,522 tokens) distils in ~18 s on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np

from litellm_proteus.artifact import MANIFEST_FILE, encoder_files_sha256, read_manifest, save_shared_safetensors
from litellm_proteus.encoder import STATIC_TABLE_FILE, STATIC_TABLE_KEY, open_encoder, static_table_path

RECIPE = "token-in-context:[prefix] t [suffix], hidden state at t; no weighting; fp16 table"
INFO_FILE = "proteus_static.json"


def distill_static(
    base: str, out_dir: str | os.PathLike, *, device: str = "auto", batch_size: int = 1024, progress: bool = False
) -> Path:
    """Distil ``base`` (any encoder ``open_encoder`` opens) into a static encoder folder ``out_dir``."""
    import torch

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size}")
    encoder = open_encoder(base, device=device, backend="hf")  # its tokenizer and special-token template
    if getattr(encoder, "model", None) is None:  # a static encoder has a table, no model
        raise ValueError(f"encoder {base!r} is already static")
    prefix, suffix = encoder.special_ids
    n_tokens = min(len(encoder.tokenizer), encoder.model.get_input_embeddings().num_embeddings)
    table = np.zeros((n_tokens, encoder.embed_dim), dtype=np.float32)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_tokens, desc=f"distilling {base}", unit="token")
    with torch.inference_mode():
        for start in range(0, n_tokens, batch_size):
            ids = torch.arange(start, min(n_tokens, start + batch_size))
            columns = [torch.full_like(ids, i) for i in prefix] + [ids] + [torch.full_like(ids, i) for i in suffix]
            input_ids = torch.stack(columns, dim=1).to(encoder.device)
            hidden = encoder.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).last_hidden_state
            table[start : start + len(ids)] = hidden[:, len(prefix)].float().cpu().numpy()
            if bar:
                bar.update(len(ids))
    if bar:
        bar.close()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_shared_safetensors({STATIC_TABLE_KEY: torch.from_numpy(table).half()}, out / STATIC_TABLE_FILE, {"base": base})
    encoder.tokenizer.save_pretrained(out)
    info = {"base": base, "recipe": RECIPE, "tokens": n_tokens, "dims": encoder.embed_dim}
    (out / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return out


def cached_static_encoder(base: str, cache_dir: str | os.PathLike | None, *, device: str = "auto", progress: bool = False) -> Path:
    """A static encoder distilled from ``base``, reused from ``cache_dir`` when it was made before
    (keyed by the base name and the recipe); without a cache dir it is distilled into a temp folder."""
    if static_table_path(base) is not None:  # already a static folder
        return Path(base)
    if cache_dir is None:
        import atexit
        import tempfile

        scratch = tempfile.mkdtemp(prefix="proteus-static-")
        atexit.register(shutil.rmtree, scratch, True)  # the artifact keeps its own copy
        return distill_static(base, scratch, device=device, progress=progress)
    key = hashlib.sha256(f"{base}|{RECIPE}".encode()).hexdigest()[:16]
    folder = Path(cache_dir) / "static" / key
    if static_table_path(str(folder)) is None:
        partial = folder.with_name(folder.name + f".partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        distill_static(base, partial, device=device, progress=progress)
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)  # atomic: a crashed run never leaves a half-written table behind
    return folder


def copy_static_encoder(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Put a static encoder folder inside an artifact (``target`` is replaced)."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)


def share_static_encoder(artifact_dir: str | os.PathLike, shared: str | os.PathLike) -> Path:
    """Point the artifact's bundled static encoder at ``shared`` (a folder with the same files, byte
    for byte, e.g. the default artifact's ``encoder/``) and delete the artifact's own copy: artifacts
    shipped together then hold one table.  The manifest keeps the files' hashes, checked at load."""
    artifact, shared = Path(artifact_dir), Path(shared)
    manifest = read_manifest(artifact)
    spec = manifest.encoder
    if not spec.bundled or static_table_path(str(shared)) is None:
        raise ValueError(f"{artifact}: only a bundled static encoder can be shared, with a static encoder folder ({shared})")
    own = artifact / spec.name
    if encoder_files_sha256(shared) != spec.files_sha256:
        raise ValueError(f"{shared}: its files differ from {artifact}'s encoder (manifest encoder.files_sha256); not shared")
    name = os.path.relpath(shared.resolve(), artifact.resolve())
    updated = manifest.model_copy(update={"encoder": spec.model_copy(update={"name": Path(name).as_posix()})})
    (artifact / MANIFEST_FILE).write_text(json.dumps(updated.model_dump(mode="json"), indent=2) + "\n")
    if own.resolve() != shared.resolve():
        shutil.rmtree(own, ignore_errors=True)
    return shared


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--encoder", default="all-MiniLM-L6-v2", help="HF model name or local path (default: all-MiniLM-L6-v2)")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write (usable as --encoder anywhere)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda")
    parser.add_argument("--batch-size", type=int, default=1024, help="tokens per forward pass (default 1024)")
    parser.add_argument("--quiet", dest="progress", action="store_false", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    target = Path(args.out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        # a table a running proxy has mapped must never be rewritten in place (docs/lean-serving.md)
        raise ValueError(f"--out {target} {'is not empty' if target.is_dir() else 'is a file'}: distil into a new or "
                         "empty folder, then point the artifact's encoder at it")
    out = distill_static(args.encoder, args.out, device=args.device, batch_size=args.batch_size, progress=args.progress)
    print(json.dumps(json.loads((out / INFO_FILE).read_text()) | {"out": str(out)}, indent=2))
    return 0
