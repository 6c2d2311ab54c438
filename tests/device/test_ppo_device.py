"""One PPO iteration (rollout, advantages, clipped update) runs entirely on the model's device."""

from __future__ import annotations

import torch

from litellm_proteus.model import ModelConfig, ProteusModel
from proteus_train.config import TrainConfig
from proteus_train.ppo import Rollout, ppo_update, sample_actions


def test_ppo_iteration_stays_on_the_model_device(foreign_device):
    sessions, batch_size, group, k = 3, 4, 2, 5
    config = TrainConfig(batch_size=batch_size, group_size=group, ppo_epochs=2, parallel_sessions=sessions)
    model = ProteusModel(ModelConfig(embed_dim=8, n_models=k, hidden_dim=16)).to(foreign_device)
    rows = sessions * batch_size * group

    def on_device(*shape: int) -> torch.Tensor:
        return torch.zeros(*shape, device=foreign_device)

    batch = Rollout(
        z=on_device(rows, 16), p=on_device(rows, k), outcomes=on_device(rows, k), cost_norm=on_device(rows, k),
        tau=on_device(rows), tau_norm=on_device(rows), lam=on_device(rows), lam_input=on_device(rows),
    )
    optimizer = torch.optim.AdamW(model.parameters())
    accuracy, choice = sample_actions(model, batch, sessions, config)
    assert accuracy.shape == (sessions,) and choice.shape == (sessions * batch_size,)
    assert {t.device for t in (accuracy, choice, batch.mu, batch.advantages, batch.returns)} == {foreign_device}
    stats = ppo_update(model, optimizer, batch, config)
    assert {v.device for v in stats.values()} == {foreign_device}
    assert all(p.device == foreign_device for p in model.parameters())
