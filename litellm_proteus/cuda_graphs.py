"""CUDA graphs for the decision path: one captured graph per padded input shape, replayed.

A transformer decision at batch 1 launches a few hundred small kernels; in eager mode the host's
launch overhead, not the GPU, sets its latency (MiniLM, bf16, 1 x 128 tokens on an H100: 1.7 ms
eager, 0.3 ms replayed; docs/gpu.md).  ``ShapeGraphs`` captures ``fn`` once per input shape on first
use and replays it after that.  Callers pad their inputs to a few shapes (``batch_bucket``,
``length_bucket``) so a handful of graphs serve every request.

Graph replays reuse the captured buffers: ``__call__`` returns the outputs copied to the host, under
one process-wide lock (PyTorch allows one capture at a time per process, and no other GPU work in
the capturing thread's way), so two threads never read each other's results.  A shape whose capture
fails (a model whose forward needs the host) runs eagerly from then on, with one warning.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

log = logging.getLogger("litellm_proteus")

# Padded lengths: multiples of 32 up to 256 tokens, then of 64 (pads at most 31 / 63 tokens).
_FINE_LENGTH_STEP, _COARSE_LENGTH_STEP, _COARSE_FROM = 32, 64, 256
# Graphs kept per ShapeGraphs; a shape past it runs eagerly (bounded GPU memory, bounded capture time).
MAX_GRAPHS = 128
# Eager runs before a capture: cuBLAS/cuDNN pick and allocate their workspaces outside the graph.
WARMUP_RUNS = 2
# Every capture and replay of the process: captures must not overlap any other GPU work.
_GPU_LOCK = threading.Lock()
# The cache entry of a shape that could not be captured: it runs eagerly.
_EAGER = "eager"


def batch_bucket(rows: int, largest: int) -> int:
    """The padded batch for ``rows`` requests: the next power of two, at most ``largest``."""
    bucket = 1
    while bucket < rows:
        bucket *= 2
    return min(bucket, largest)


def length_bucket(tokens: int) -> int:
    """The padded sequence length for ``tokens`` tokens (see the step constants)."""
    step = _FINE_LENGTH_STEP if tokens <= _COARSE_FROM else _COARSE_LENGTH_STEP
    return max(step, -(-tokens // step) * step)


class ShapeGraphs:
    """``fn(*inputs) -> tuple of tensors`` on ``device``, captured per input shape and replayed.

    ``inputs``: tensors of the padded shape, on the host or the device (they are copied into the
    graph's own input buffers on ``device``); a shape seen for the first time is run
    eagerly ``WARMUP_RUNS`` times on a side stream, then captured on it.  Every graph shares one
    memory pool (replays never overlap: they run under the process-wide lock)."""

    def __init__(self, fn: Callable, device: str, *, max_graphs: int = MAX_GRAPHS):
        import torch

        self._torch = torch
        self._device = device
        self._fn = fn
        self._max_graphs = max_graphs
        self._graphs: dict[tuple, tuple | str] = {}  # shape key -> (graph, inputs, outputs) or _EAGER
        self._pool = None
        self._warned = False

    def __len__(self) -> int:
        """Graphs captured (shapes that run eagerly not counted)."""
        return sum(entry is not _EAGER for entry in self._graphs.values())

    def _capture(self, inputs: Sequence):
        torch = self._torch
        device = torch.device(self._device)
        static_inputs = [x.to(self._device, copy=True) for x in inputs]
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self._fn(*static_inputs)
        torch.cuda.current_stream(device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self._pool, stream=side):  # this device's stream, not a shared one
                static_outputs = tuple(self._fn(*static_inputs))
        except RuntimeError as exc:
            if not self._warned:
                log.warning("PROTEUS: a CUDA graph could not be captured (%s); that input shape runs eagerly", exc)
                self._warned = True
            return _EAGER
        return graph, static_inputs, static_outputs

    def __call__(self, *inputs) -> list:
        """``fn``'s outputs for ``inputs``, as CPU tensors."""
        key = tuple((tuple(x.shape), x.dtype) for x in inputs)
        with _GPU_LOCK, self._torch.cuda.device(self._device):
            entry = self._graphs.get(key)
            if entry is None and len(self._graphs) < self._max_graphs:
                entry = self._graphs[key] = self._capture(inputs)
            if entry is None or entry is _EAGER:
                return [y.cpu() for y in self._fn(*(x.to(self._device) for x in inputs))]
            graph, static_inputs, static_outputs = entry
            for buffer, x in zip(static_inputs, inputs):
                buffer.copy_(x, non_blocking=True)
            graph.replay()
            return [y.cpu() for y in static_outputs]
