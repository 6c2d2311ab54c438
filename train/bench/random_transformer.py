"""An artifact that routes on a BERT-family transformer with random weights, for speed measurements
and GPU tests on hosts without the trained encoder's weights (a forward pass costs the same whatever
the weights hold; the bundled static encoder's tokenizer is MiniLM's).  Its decisions mean nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR


def write_random_transformer_artifact(config, out: str | Path, artifact: str | Path = DEFAULT_ARTIFACT_DIR) -> Path:
    """Copy the static-encoder ``artifact`` to ``out`` with its encoder replaced by a
    ``transformers.BertModel(config)`` of random weights; returns ``out``."""
    from transformers import BertModel

    out = Path(out)
    shutil.copytree(artifact, out)
    manifest = json.loads((out / "manifest.json").read_text())
    encoder = out / manifest["encoder"]["name"]
    (encoder / "static_embeddings.safetensors").unlink()
    (encoder / "proteus_static.json").unlink()
    BertModel(config).save_pretrained(encoder)
    manifest["encoder"].update(static_from=None, files_sha256={})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out
