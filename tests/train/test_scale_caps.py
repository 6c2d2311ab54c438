"""Row caps that keep training cost flat past a size: head epochs (``fit_early_stopping``'s
``epoch_rows``) and the calibration sample (``calibration_sample``)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from proteus_train.calibration import calibration_sample
from proteus_train.fitting import fit_early_stopping


def fit(x, y, x_val, y_val, epoch_rows, epochs=3, seed=0):
    torch.manual_seed(seed)
    module = nn.Linear(x.shape[1], 1)
    seen: list[int] = []

    def forward(batch: torch.Tensor) -> torch.Tensor:
        seen.append(len(batch))
        return module(batch)

    loss = fit_early_stopping(
        module, forward, nn.functional.mse_loss, x, y, x_val, y_val, params=list(module.parameters()), epochs=epochs,
        lr=1e-2, weight_decay=0.0, batch_size=10, patience=100, generator=torch.Generator().manual_seed(seed),
        epoch_rows=epoch_rows,
    )
    return module, loss, seen


def data(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return x, x.sum(1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=g)


def test_an_epoch_is_capped_at_epoch_rows_and_validation_at_a_fixed_sample():
    (x, y), (x_val, y_val) = data(1000), data(500, seed=1)
    _, _, seen = fit(x, y, x_val, y_val, epoch_rows=100)
    train_batches, val_batches = [s for s in seen if s <= 10], [s for s in seen if s > 10]
    assert len(train_batches) == 3 * 10 and sum(train_batches) == 3 * 100
    assert val_batches == [100, 100, 100]
    _, _, uncapped = fit(x, y, x_val, y_val, epoch_rows=None)
    assert sum(s for s in uncapped if s <= 10) == 3 * 1000 and [s for s in uncapped if s > 10] == [500] * 3


def test_a_cap_above_the_data_changes_nothing():
    (x, y), (x_val, y_val) = data(200), data(50, seed=1)
    capped, capped_loss, _ = fit(x, y, x_val, y_val, epoch_rows=16_384)
    plain, plain_loss, _ = fit(x, y, x_val, y_val, epoch_rows=None)
    assert capped_loss == plain_loss
    for a, b in zip(capped.parameters(), plain.parameters()):
        assert torch.equal(a, b)


def test_calibration_sample_is_everything_up_to_the_cap_then_a_seeded_sorted_sample():
    assert calibration_sample(100, 100, seed=0) == slice(None)
    picked = calibration_sample(1000, 100, seed=3)
    assert len(picked) == len(np.unique(picked)) == 100 and np.all(np.diff(picked) > 0)
    assert 0 <= picked.min() and picked.max() < 1000
    np.testing.assert_array_equal(picked, calibration_sample(1000, 100, seed=3))
    assert not np.array_equal(picked, calibration_sample(1000, 100, seed=4))
