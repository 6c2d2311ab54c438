"""A copy of an artifact that routes on a transformer of MiniLM's architecture with random weights.

For speed measurements only (``proteus bench --artifact``) on hosts where the all-MiniLM-L6-v2
weights are absent: a forward pass costs the same whatever the weights hold, and the bundled static
encoder's tokenizer is MiniLM's.  Routing decisions of such an artifact mean nothing.

    python scripts/transformer_artifact.py CONFIG_JSON OUT_DIR [--artifact DIR]
"""

from __future__ import annotations

import argparse

from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR
from proteus_train.bench.random_transformer import write_random_transformer_artifact


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config_json", help="the transformer's config.json (MiniLM's: 6 layers, 384 wide)")
    parser.add_argument("out", help="artifact directory to write")
    parser.add_argument("--artifact", default=str(DEFAULT_ARTIFACT_DIR), help="static-encoder artifact to copy")
    args = parser.parse_args()
    from transformers import BertConfig

    write_random_transformer_artifact(BertConfig.from_json_file(args.config_json), args.out, args.artifact)


if __name__ == "__main__":
    main()
