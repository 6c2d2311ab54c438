"""The training-price reference the runtime compares live prices with (``manifest.average_costs``)."""

from __future__ import annotations

import numpy as np

from proteus_train.manifest import average_costs

MODELS = ["a", "b", "c"]
COSTS = np.array([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0], [100.0, 100.0, 100.0]])


def test_the_mean_cost_of_the_given_rows_for_slots_with_measured_output_tokens():
    tokens = np.array([[10.0, np.nan, 5.0], [20.0, np.nan, 5.0], [1.0, 1.0, 1.0]])
    rows = np.array([0, 1])  # the training rows only: row 2 is another split
    assert average_costs(MODELS, COSTS, tokens, rows) == {"a": 2.0, "c": 4.0}  # b: no tokens measured on these rows


def test_no_reference_without_output_tokens():
    assert average_costs(MODELS, COSTS, None, np.array([0, 1])) == {}
