"""The one supervised loop the trainer and the evaluation baselines share."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn


def fit_early_stopping(
    module: nn.Module,
    forward: Callable[[torch.Tensor], torch.Tensor],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    x_val: torch.Tensor,
    y_val: torch.Tensor,
    *,
    params: Iterable[nn.Parameter],
    epochs: int,
    lr: float,
    weight_decay: float,
    batch_size: int,
    patience: int,
    generator: torch.Generator,
    weights: torch.Tensor | None = None,
    weights_val: torch.Tensor | None = None,
    epoch_rows: int | None = None,
) -> float:
    """Minibatch AdamW on ``loss_fn(forward(x), y)`` with early stopping on the validation loss;
    ``module`` ends with the weights of the best epoch.  Returns that validation loss (with an empty
    validation set, the last training batch's loss stands in).

    ``weights`` / ``weights_val``: per-row weights passed on as ``loss_fn(pred, y, w)`` (e.g. inverse
    propensities); without them ``loss_fn`` is called with two arguments.

    ``epoch_rows``: an epoch is a fresh random sample of at most this many training rows, and early
    stopping watches a fixed random sample of at most this many validation rows, so the cost per
    epoch stops growing with the data.  Smaller data draws exactly what it draws without the cap."""

    def loss_of(pred: torch.Tensor, target: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
        return loss_fn(pred, target) if w is None else loss_fn(pred, target, w)  # type: ignore[call-arg]

    if epoch_rows is not None and len(x_val) > epoch_rows:
        watched = torch.randperm(len(x_val), generator=generator)[:epoch_rows].to(x_val.device)
        x_val, y_val = x_val[watched], y_val[watched]
        weights_val = None if weights_val is None else weights_val[watched]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    best, best_state, stale = math.inf, None, 0
    for _epoch in range(epochs):
        module.train()
        order = torch.randperm(len(x), generator=generator)[:epoch_rows].to(x.device)  # CPU generator: runs seeded alike
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            loss = loss_of(forward(x[idx]), y[idx], None if weights is None else weights[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        module.eval()
        with torch.no_grad():
            val_loss = float(loss_of(forward(x_val), y_val, weights_val)) if len(x_val) else float(loss)
        if val_loss < best - 1e-5:
            best, stale = val_loss, 0
            best_state = {k: v.detach().clone() for k, v in module.state_dict().items()}
        else:
            stale += 1
            if stale >= patience:
                break
    if best_state is not None:
        module.load_state_dict(best_state)
    module.eval()
    return best
