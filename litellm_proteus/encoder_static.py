"""The static-table encoder: a folder holding ``tokenizer.json`` and ``static_embeddings.safetensors``
(one vector per token id, distilled from a transformer by ``proteus distill-static``; see
``train/distill.py``).  A prompt's embedding is the mean of its kept tokens' vectors, L2-normalised:
a tokenisation (Rust ``tokenizers``) and a numpy table lookup, always fp32 on the CPU.  Neither
torch nor transformers is imported."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .artifact import file_sha256
from .encoder import STATIC_TABLE_KEY, Encoder

TOKENIZER_FILE = "tokenizer.json"


# safetensors dtype names a token table may use.
TABLE_DTYPES = {"F16": np.float16, "F32": np.float32}


def load_static_table(path: Path) -> tuple[np.ndarray, str]:
    """(token table in its stored dtype, e.g. fp16: half the memory of fp32, and the rows a prompt
    uses are widened exactly; SHA-256 of the file).

    The table is a read-only memory map of the tensor's bytes in the file (8-byte header length,
    JSON header, raw data: the safetensors layout): its pages are file-backed and clean, so the page
    cache holds one copy for every worker process on the host, only the pages of rows that prompts
    used become resident, and the kernel can drop them under memory pressure.  ``safetensors``'
    loaders would copy the tensor onto the heap instead.  Replace an artifact's file by renaming a
    new one over it, never by rewriting it in place, while a process maps it."""
    try:
        file_size = path.stat().st_size
        with open(path, "rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            if size > file_size - 8:
                raise ValueError(f"{path}: unreadable static token table (header length {size} exceeds the file)")
            header = json.loads(handle.read(size))
        info = header.get(STATIC_TABLE_KEY) if isinstance(header, dict) else None
        if not isinstance(info, dict) or len(info.get("shape", ())) != 2:
            raise ValueError(f"{path}: expected a 2-d tensor named {STATIC_TABLE_KEY!r} (tokens x dims)")
        if info.get("dtype") not in TABLE_DTYPES:
            raise ValueError(f"{path}: the static token table must be F16 or F32; got {info.get('dtype')!r}")
        dtype = np.dtype(TABLE_DTYPES[info["dtype"]])
        start, end = info["data_offsets"]
        rows, dims = info["shape"]
        if end - start != rows * dims * dtype.itemsize:
            raise ValueError(f"{path}: tensor {STATIC_TABLE_KEY!r} data size does not match its shape")
        offset = 8 + size + start
        if offset + rows * dims * dtype.itemsize > file_size:
            raise ValueError(f"{path}: unreadable static token table (file ends inside the tensor data)")
        table = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(rows, dims))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: unreadable static token table ({exc})") from exc
    return table, file_sha256(path)


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

    def widen_table(self) -> None:
        """Hold the table in float32: the same vectors (pooling upcasts every row it reads anyway),
        pooled 3x faster (0.34 s against 1.0 s for 2,000 prompts of 254 tokens on 2 cores) for twice
        the memory (47 MB for MiniLM's vocabulary).  For training, which embeds 100k+ prompts; the
        proxy keeps the float16 table."""
        self.static_table = self.static_table.astype(np.float32)

    def _identity(self) -> str:
        # A static encoder is its table, wherever the folder lies.
        return f"static={self.static_sha256}"

    def _content_ids(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def content_offsets(self, text: str) -> list[tuple[int, int]]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).offsets)

    def _ids_with_specials(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=True).ids

    def _embed_batch(self, id_lists: list[list[int]]) -> np.ndarray:
        """Mean of the kept content tokens' vectors, L2-normalised; an empty prompt falls back to
        its special tokens so it still gets a unit vector."""
        rows = [ids if ids else self._prefix + self._suffix for ids in id_lists]
        pooled = np.stack([self.static_table[ids].astype(np.float32).mean(axis=0) for ids in rows])
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)

