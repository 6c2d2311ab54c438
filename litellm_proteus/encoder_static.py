"""The static-table encoder: a folder holding ``tokenizer.json`` and ``static_embeddings.safetensors``
(one vector per token id, distilled from a transformer by ``proteus distill-static``; see
``train/distill.py``).  A prompt's embedding is the mean of its kept tokens' vectors, L2-normalised:
a tokenisation (Rust ``tokenizers``) and a numpy table lookup, always fp32 on the CPU.  Neither
torch nor transformers is imported."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .encoder import STATIC_TABLE_KEY, Encoder

TOKENIZER_FILE = "tokenizer.json"


def load_static_table(path: Path) -> tuple[np.ndarray, str]:
    """(token table as a C-contiguous fp32 array, SHA-256 of the file)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"{path}: unreadable static token table ({exc})") from exc
    if STATIC_TABLE_KEY not in tensors or tensors[STATIC_TABLE_KEY].ndim != 2:
        raise ValueError(f"{path}: expected a 2-d tensor named {STATIC_TABLE_KEY!r} (tokens x dims)")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return np.ascontiguousarray(tensors[STATIC_TABLE_KEY], dtype=np.float32), sha


class StaticEncoder(Encoder):
    backend = "static"

    def __init__(self, name: str, table_path: Path, **policy):
        from tokenizers import Tokenizer

        self.name = name
        self.device = "cpu"
        tokenizer_file = table_path.parent / TOKENIZER_FILE
        if not tokenizer_file.is_file():
            raise ValueError(
                f"encoder {name!r}: the static table {table_path.name} needs its own {TOKENIZER_FILE} beside it; "
                "the folder is incomplete (re-run proteus distill-static)"
            )
        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.tokenizer.no_truncation()  # the length policy cuts content ids itself
        self.tokenizer.no_padding()
        self.static_table, self.static_sha256 = load_static_table(table_path)
        vocab = self.tokenizer.get_vocab_size(with_added_tokens=True)
        if vocab != self.static_table.shape[0]:
            raise ValueError(
                f"encoder {name!r}: the tokenizer has {vocab} tokens but the static table "
                f"{table_path.name} has {self.static_table.shape[0]} rows; the folder is incomplete or mixed "
                "(re-run proteus distill-static)"
            )
        self.embed_dim = int(self.static_table.shape[1])
        self._init_policy(**policy)

    def _identity(self) -> str:
        # A static encoder is its table, wherever the folder lies.
        return f"static={self.static_sha256}"

    def content_ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def content_offsets(self, text: str) -> list[tuple[int, int]]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).offsets)

    def _ids_with_specials(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=True).ids

    def _embed_batch(self, id_lists: list[list[int]]) -> np.ndarray:
        """Mean of the kept content tokens' vectors, L2-normalised; an empty prompt falls back to
        its special tokens so it still gets a unit vector."""
        rows = [ids if ids else self._prefix + self._suffix for ids in id_lists]
        pooled = np.stack([self.static_table[ids].mean(axis=0) for ids in rows])
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)

