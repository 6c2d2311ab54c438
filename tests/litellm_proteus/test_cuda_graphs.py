"""The host side of the CUDA-graph path, on any machine: the padded shapes, and the settings that
turn it on (the replays themselves are tested in tests/device/test_cuda.py where a GPU is present)."""

from __future__ import annotations

import pytest

from litellm_proteus.config import PredictorOptions
from litellm_proteus.cuda_graphs import batch_bucket, length_bucket
from litellm_proteus.predictor import ProteusPredictor


@pytest.mark.parametrize(("rows", "largest", "bucket"), [(1, 128, 1), (2, 128, 2), (3, 128, 4), (33, 128, 64),
                                                           (128, 128, 128), (100, 64, 64), (5, 4, 4)])
def test_batch_bucket_is_the_next_power_of_two_up_to_the_largest(rows, largest, bucket):
    assert batch_bucket(rows, largest) == bucket


@pytest.mark.parametrize(("tokens", "bucket"), [(1, 32), (32, 32), (33, 64), (130, 160), (256, 256), (257, 320),
                                                 (512, 512)])
def test_length_bucket_pads_to_32_then_64_tokens(tokens, bucket):
    assert length_bucket(tokens) == bucket


def test_every_length_fits_its_bucket_with_bounded_padding():
    for tokens in range(1, 1025):
        bucket = length_bucket(tokens)
        assert tokens <= bucket < tokens + (32 if tokens <= 256 else 64)


def test_cpu_predictor_runs_without_graphs_whatever_the_setting():
    predictor = ProteusPredictor(device="cpu", runtime="torch", cuda_graphs=True)
    assert predictor.cuda_graphs is False and predictor.network._graphs is None
    with pytest.raises(ValueError, match="predictor_options.cuda_graphs must be true or false"):
        ProteusPredictor(device="cpu", cuda_graphs="yes")


def test_predictor_options_take_the_graph_and_tokenizer_settings():
    options = PredictorOptions(cuda_graphs=False, tokenizer_threads=4)
    assert options.as_kwargs() == {"cuda_graphs": False, "tokenizer_threads": 4}
    assert PredictorOptions().cuda_graphs is True and PredictorOptions().tokenizer_threads is None
    with pytest.raises(ValueError, match="tokenizer_threads"):
        PredictorOptions(tokenizer_threads=0)
