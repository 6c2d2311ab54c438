"""Which device decides: ``device: auto`` picks the faster one for the artifact's encoder.

Measured on one H100 host (docs/gpu.md): a static token table decides faster on the CPU (batch 1,
128 tokens: p50 1.9 ms on 2 CPU threads, 2.4 ms on CUDA; tokenisation and Python bound it, and a
GPU round trip only adds), while a transformer encoder belongs on the GPU.  An explicit ``cpu``,
``cuda`` or ``cuda:N`` is honoured as given.
"""

from __future__ import annotations


def choose_device(requested: str, encoder_path: str) -> str:
    """The device for a predictor whose encoder lives at ``encoder_path`` (a folder or a model name)."""
    import torch

    from .encoder import resolve_device, static_table_path

    if requested != "auto":
        return resolve_device(requested)
    if not torch.cuda.is_available():
        return "cpu"
    return "cpu" if static_table_path(encoder_path) is not None else "cuda"
