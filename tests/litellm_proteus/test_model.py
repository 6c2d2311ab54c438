import pytest
import torch

from litellm_proteus.model import ModelConfig, ProteusModel, routing_scores


def make(**kw):
    torch.manual_seed(0)
    return ProteusModel(ModelConfig(embed_dim=16, n_models=3, hidden_dim=32, **kw))


def test_scoring_function_is_equation_2():
    p = torch.tensor([[0.9, 0.6, 0.5]])
    mu = torch.tensor([0.25])
    boost = torch.tensor([0.2, 0.0, -0.1])
    cost = torch.tensor([[1.0, 0.3, 0.0]])
    s = routing_scores(p, mu, boost, torch.tensor(2.0), cost)
    expected = p + 0.25 * boost - (0.75**2) * cost
    assert torch.allclose(s, expected)


def test_mu_extremes_pick_quality_or_cost():
    model = make()
    with torch.no_grad():
        model.boost.copy_(torch.tensor([0.3, 0.0, 0.0]))
    p = torch.tensor([[0.8, 0.7, 0.6]])
    cost = torch.tensor([[1.0, 0.05, 0.0]])
    assert int(model.scores(p, torch.tensor([1.0]), cost).argmax()) == 0
    assert int(model.scores(p, torch.tensor([0.0]), cost).argmax()) == 1


def test_mask_excludes_slots():
    model = make()
    s = model.scores(torch.tensor([[0.9, 0.1, 0.1]]), torch.tensor([0.5]), torch.zeros(1, 3), torch.tensor([[False, True, True]]))
    assert s[0, 0] == float("-inf") and int(s.argmax()) in (1, 2)


def test_gamma_stays_within_bounds():
    model = make()
    for raw in (-1e4, -3.0, 0.0, 3.0, 1e4):
        with torch.no_grad():
            model.gamma_raw.fill_(raw)
        assert 2.0 <= float(model.gamma) <= 8.0
    with torch.no_grad():
        model.gamma_raw.fill_(0.0)
    assert float(model.gamma) == pytest.approx(5.0)


def test_fixed_gamma_ablation_and_bounds_validation():
    assert float(make(fixed_gamma=3.0).gamma) == 3.0
    with pytest.raises(ValueError):
        ModelConfig(embed_dim=4, n_models=2, fixed_gamma=9.0)


def test_policy_depends_on_tau_and_lambda_and_not_on_gradients_of_z():
    model = make()
    z = model.embed(torch.randn(4, 16))
    a = model.policy(z, 0.0, 0.0).alpha
    b = model.policy(z, 1.0, 3.0).alpha
    assert a.shape == (4,)
    # perturb trunk so the conditioning matters, then check detachment
    with torch.no_grad():
        for prm in model.beta_head.parameters():
            prm.add_(0.5)
    assert not torch.allclose(model.policy(z, 0.0, 0.0).alpha, model.policy(z, 1.0, 3.0).alpha)
    model.policy(z, 0.5, 1.0).alpha.sum().backward()
    assert all(p.grad is None for p in model.projection.parameters())
    assert a.requires_grad and b.requires_grad


def test_route_is_deterministic_and_in_range():
    model = make()
    emb = torch.randn(5, 16)
    out1 = model.route(emb, 0.5, torch.rand(5, 3))
    out2 = model.route(emb, 0.5, out1.scores.new_zeros(5, 3) + torch.rand(5, 3))
    assert out1.choice.shape == (5,) and ((0 <= out1.mu) & (out1.mu <= 1)).all()
    assert torch.equal(model.route(emb, 0.5, torch.zeros(5, 3)).mu, model.route(emb, 0.5, torch.zeros(5, 3)).mu)
    assert out2.p.shape == (5, 3)


def test_critic_optional():
    assert make(use_critic=False).critic is None
    with pytest.raises(RuntimeError):
        make(use_critic=False).value(torch.randn(2, 32), 0.5, 1.0)
