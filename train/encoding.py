"""The encoder a training run embeds prompts with, and ``--finetune-encoder``."""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import nn

from litellm_proteus.encoder import Encoder, open_encoder
from litellm_proteus.encoder_static import StaticEncoder
from litellm_proteus.model import ModelConfig, ProteusModel

from .config import TrainConfig
from .data.logs import RoutingLog
from .heads import masked_bce

BUNDLED_ENCODER_DIR = "encoder"  # a fine-tuned or static encoder travels inside the artifact


def training_encoder(config: TrainConfig, name: str | None = None) -> Encoder:
    """The frozen encoder ``name`` (default: ``config.encoder``) with the embedding cache."""
    cache = os.path.join(config.cache_dir, "embeddings") if config.cache_dir else None
    encoder = open_encoder(
        name or config.encoder,
        device=config.device,
        max_tokens=config.max_tokens,
        truncation=config.truncation,  # type: ignore[arg-type]
        cache_dir=cache,
    )
    if isinstance(encoder, StaticEncoder):
        encoder.widen_table()  # same embeddings, faster pooling over a whole routing log
    return encoder


def finetune_encoder(
    encoder: Encoder, data: RoutingLog, train_idx: np.ndarray, config: TrainConfig, generator: torch.Generator
) -> None:
    """--finetune-encoder: adapt the encoder to the routing task with the performance loss.

    A temporary projection + performance head is trained jointly with the encoder (encoder_lr for
    the encoder, perf_lr for the head) for ``finetune_epochs`` epochs of masked BCE on the train
    split; the tuned encoder then re-embeds every prompt (its cache fingerprint changes, so cached
    frozen embeddings are never reused) and is saved inside the artifact.
    """
    encoder.name = f"{encoder.name}+finetuned(seed={config.seed})"
    encoder.cache = None
    head = ProteusModel(ModelConfig(embed_dim=encoder.embed_dim, n_models=len(data.models), hidden_dim=config.hidden_dim))
    head.to(encoder.device)
    optimizer = torch.optim.AdamW(
        [
            {"params": encoder.model.parameters(), "lr": config.encoder_lr},
            {"params": list(head.projection.parameters()) + list(head.performance_head.parameters()), "lr": config.perf_lr},
        ],
        weight_decay=config.perf_weight_decay,
    )
    targets = torch.as_tensor(data.scores, dtype=torch.float32)
    bar = None
    if config.progress:  # minutes per epoch on CPU: say so
        from tqdm.auto import tqdm

        per_epoch = -(-len(train_idx) // config.batch_size)
        bar = tqdm(total=config.finetune_epochs * per_epoch, desc="fine-tuning the encoder", unit="batch")
    encoder.model.train()
    for _epoch in range(config.finetune_epochs):
        order = train_idx[torch.randperm(len(train_idx), generator=generator).numpy()]
        for start in range(0, len(order), config.batch_size):
            idx = order[start : start + config.batch_size]
            emb = encoder.encode_tensor([data.prompts[i] for i in idx])
            loss = masked_bce(head.performance_logits(head.embed(emb)), targets[idx].to(encoder.device))
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(encoder.model.parameters(), config.max_grad_norm)
            optimizer.step()
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.4f}")
    if bar is not None:
        bar.close()
    encoder.model.eval()
    encoder.model.to("cpu" if encoder.device == "cpu" else encoder.device)
