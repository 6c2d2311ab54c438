import math

import pytest
import torch
from scipy import stats

from litellm_proteus.distributions import MU_EPS, BetaHead, BetaPolicyOutput


def test_log_prob_matches_scipy():
    out = BetaPolicyOutput(alpha=torch.tensor([2.0, 5.0]), beta=torch.tensor([3.0, 1.5]))
    mu = torch.tensor([0.3, 0.8])
    expected = [stats.beta(2.0, 3.0).logpdf(0.3), stats.beta(5.0, 1.5).logpdf(0.8)]
    assert torch.allclose(out.log_prob(mu), torch.tensor(expected, dtype=torch.float32), atol=1e-5)


def test_entropy_matches_scipy():
    out = BetaPolicyOutput(alpha=torch.tensor([2.0]), beta=torch.tensor([7.0]))
    assert float(out.entropy()) == pytest.approx(stats.beta(2.0, 7.0).entropy(), abs=1e-5)


def test_log_prob_is_finite_at_the_boundaries():
    out = BetaPolicyOutput(alpha=torch.tensor([3.0, 3.0]), beta=torch.tensor([3.0, 3.0]))
    assert torch.isfinite(out.log_prob(torch.tensor([0.0, 1.0]))).all()


def test_samples_stay_inside_the_open_interval_and_are_seeded():
    out = BetaPolicyOutput(alpha=torch.full((5000,), 0.3), beta=torch.full((5000,), 0.3))
    torch.manual_seed(1)
    a = out.sample()
    torch.manual_seed(1)
    b = out.sample()
    assert torch.equal(a, b)
    assert float(a.min()) >= MU_EPS * 0.999 and float(a.max()) <= 1 - MU_EPS * 0.999


def test_mean_is_alpha_over_concentration():
    out = BetaPolicyOutput(alpha=torch.tensor([3.0]), beta=torch.tensor([1.0]))
    assert float(out.mean) == pytest.approx(0.75)
    assert float(out.concentration) == pytest.approx(4.0)


def test_head_is_unimodal_and_starts_centred():
    head = BetaHead(8)
    out = head(torch.randn(4, 8) * 100)
    assert (out.alpha > 1).all() and (out.beta > 1).all()
    fresh = head(torch.zeros(2, 8))
    assert torch.allclose(fresh.mean, torch.full((2,), 0.5)) and math.isclose(float(fresh.alpha[0]), 2.0, rel_tol=1e-3)
