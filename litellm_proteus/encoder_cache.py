"""Embedding caches shared by every encoder backend: an in-process LRU (``memory_cache=N``) and a
persistent SQLite store per encoder fingerprint (``cache_dir``).  Both are keyed by ``text_hash``."""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()  # encode() passes valid_text: always UTF-8-able


class MemoryLRU:
    """Thread-safe in-process ``text hash -> embedding`` LRU (the micro-batcher and callers may share it)."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> np.ndarray | None:
        with self._lock:
            vec = self._items.get(key)
            if vec is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return vec

    def put(self, key: str, vec: np.ndarray) -> None:
        with self._lock:
            self._items[key] = vec
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)



logger = logging.getLogger("litellm_proteus.encoder_cache")
BUSY_TIMEOUT_S = 0.1  # how long a read or write waits on another process's lock before it skips the cache
WARN_EVERY_S = 60.0


class EmbeddingCache:
    """Persistent text -> embedding store for one encoder fingerprint (one SQLite file, in WAL mode so
    that readers never wait on a writer).  Proxy workers and training runs share the file; the cache
    is only an optimisation, so a lookup or a write that meets a lock held past ``BUSY_TIMEOUT_S``
    (or any SQLite error) is skipped, with a rate-limited warning: the texts are encoded instead, and
    no decision waits on another process."""

    def __init__(self, directory: str | os.PathLike, fingerprint: str):
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
        self.path = path / f"embeddings-{name}.sqlite"
        self._db = sqlite3.connect(self.path, check_same_thread=False)  # set-up waits as long as SQLite's default
        self._warned_at = -WARN_EVERY_S
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS emb (key TEXT PRIMARY KEY, vec BLOB)")
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('fingerprint', ?)", (fingerprint,))
        self._db.commit()
        self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        try:
            for start in range(0, len(keys), 500):
                chunk = list(keys[start : start + 500])
                rows = self._db.execute(
                    f"SELECT key, vec FROM emb WHERE key IN ({','.join('?' * len(chunk))})", chunk
                ).fetchall()
                for key, blob in rows:
                    found[key] = np.frombuffer(blob, dtype=np.float32)
        except sqlite3.Error as exc:
            self._skipped("read", exc)
        return found

    def put_many(self, items: Iterable[tuple[str, np.ndarray]]) -> None:
        try:
            self._db.executemany(
                "INSERT OR REPLACE INTO emb VALUES (?, ?)",
                ((k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items),
            )
            self._db.commit()
        except sqlite3.Error as exc:
            self._db.rollback()
            self._skipped("write", exc)

    def _skipped(self, what: str, exc: sqlite3.Error) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            logger.warning("PROTEUS: embedding cache %s skipped (%s: %s); the texts are encoded instead", what,
                           self.path, exc)

    def close(self) -> None:
        self._db.close()


