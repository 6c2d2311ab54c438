"""Which device decides: ``device: auto`` is CUDA wherever a CUDA device is usable, for every encoder.

Measured on H100 hosts with the decision path's CUDA graphs (docs/gpu.md): the bundled static
table decided a 128-token prompt in 1.0-1.5 ms on CUDA against 1.8-2.0 ms on the CPU, and 3,700-4,800
decisions/s at batch 128 against 2,400-3,100/s on the same hosts' CPUs; a transformer encoder is
faster on the GPU by far.
On a host without a GPU driver, ``auto`` is the CPU and torch is never imported for it, so a
static-table worker stays on the numpy runtime.  An explicit ``cpu``, ``cuda`` or ``cuda:N`` is
honoured as given.
"""

from __future__ import annotations

import importlib.util
import os

# Device files of a GPU driver (NVIDIA; AMD ROCm; WSL): without one, torch cannot see a GPU.
GPU_DEVICE_FILES: tuple[str, ...] = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def cuda_usable() -> bool:
    """Whether torch can run on a CUDA device here; torch is imported only where a GPU driver is."""
    if not any(os.path.exists(path) for path in GPU_DEVICE_FILES) or importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def choose_device(requested: str) -> str:
    """The device for a predictor asked to run on ``requested``."""
    from .encoder import resolve_device

    if requested != "auto":
        return resolve_device(requested)
    return "cuda" if cuda_usable() else "cpu"
