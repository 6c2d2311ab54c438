"""A copy of an artifact that routes on a transformer of MiniLM's architecture with random weights.

For speed measurements only (``proteus bench --artifact``) on hosts where the all-MiniLM-L6-v2
weights are absent: a forward pass costs the same whatever the weights hold, and the bundled static
encoder's tokenizer is MiniLM's.  Routing decisions of such an artifact mean nothing.

    python scripts/transformer_artifact.py CONFIG_JSON OUT_DIR [--artifact DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config_json", help="the transformer's config.json (MiniLM's: 6 layers, 384 wide)")
    parser.add_argument("out", help="artifact directory to write")
    parser.add_argument("--artifact", default=str(DEFAULT_ARTIFACT_DIR), help="static-encoder artifact to copy")
    args = parser.parse_args()
    from transformers import BertConfig, BertModel

    out = Path(args.out)
    shutil.copytree(args.artifact, out)
    manifest = json.loads((out / "manifest.json").read_text())
    encoder = out / manifest["encoder"]["name"]
    (encoder / "static_embeddings.safetensors").unlink()
    (encoder / "proteus_static.json").unlink()
    BertModel(BertConfig.from_json_file(args.config_json)).save_pretrained(encoder)
    manifest["encoder"].update(static_from=None, files_sha256={})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
