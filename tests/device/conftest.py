"""A second device without a GPU: PyTorch's ``meta`` device.

Tensors on ``meta`` carry shapes and a device but no data, and PyTorch refuses to mix them with CPU
tensors exactly as it refuses CPU with CUDA ("Expected all tensors to be on the same device"; 0-d
CPU scalars are accepted by both).  A model moved to ``meta`` therefore fails wherever code builds
a tensor on the default device instead of the model's -- the bug class a CUDA host would hit --
on any CPU-only CI machine.  Reading values (``.item()``, ``.numpy()``) is impossible there, so these
tests drive the tensor paths, not the host-side bookkeeping around them.
"""

from __future__ import annotations

import pytest
import torch

FOREIGN_DEVICE = "meta"


@pytest.fixture
def foreign_device():
    """``meta`` ready for whole forward/backward passes: distribution argument checks (which read
    values) off, and a shape-only kernel for the Beta sampler's ``_sample_dirichlet``."""
    previous = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    library = torch.library.Library("aten", "IMPL")
    library.impl("_sample_dirichlet", lambda concentration, generator=None: torch.empty_like(concentration), "Meta")
    try:
        yield torch.device(FOREIGN_DEVICE)
    finally:
        library._destroy()
        torch.distributions.Distribution.set_default_validate_args(previous)
