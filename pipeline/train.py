"""Train the VAE on a seeded 75 % of the beats, on the device the beats already live on.

See Also
--------
pipeline.embed.embed_beats : the previous step.
pipeline.score.score_beats : the next step.
"""
from __future__ import annotations

import contextlib
import math
from typing import Callable

import torch

from pipeline.config import VAEConfig
from pipeline.model import VAE


def split_train(n_beats: int, train_fraction: float, seed: int) -> torch.Tensor:
    """Boolean mask (CPU) of the training beats: a seeded permutation, the same on every device."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be between 0 and 1; got {train_fraction}")
    order = torch.randperm(n_beats, generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros(n_beats, dtype=torch.bool)
    mask[order[: max(1, int(round(train_fraction * n_beats)))]] = True
    return mask


def fit_vae(rows: torch.Tensor, is_train: torch.Tensor, cfg: VAEConfig = VAEConfig(),
            progress: Callable[[float, str], None] | None = None) -> tuple[VAE, list[float]]:
    """Fit a :class:`~pipeline.model.VAE` to ``rows[is_train]``.

    ``rows`` is an (n, width) float32 tensor on the CPU or a CUDA device; batches are index
    slices of it on that device, so no step copies data to or from the host. The loss is read
    back once per epoch (the only sync point) for ``history`` and ``progress(fraction, text)``.
    """
    if rows.ndim != 2:
        raise ValueError(f"beats must be 2-D (n_beats, width); got shape {tuple(rows.shape)}")
    device = rows.device
    train = rows[is_train.to(device)]
    n_train = train.shape[0]
    if n_train < 2:
        raise ValueError(f"need at least 2 training beats; got {n_train}")
    torch.manual_seed(cfg.seed)
    model = VAE(rows.shape[1], cfg).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, fused=device.type == "cuda")
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" and cfg.mixed_precision
                else contextlib.nullcontext())
    generator = torch.Generator(device=device).manual_seed(cfg.seed)
    batch = max(1, min(cfg.batch_size, n_train // cfg.min_steps_per_epoch or n_train))
    steps = math.ceil(n_train / batch)
    history = []
    model.train()
    for epoch in range(cfg.epochs):
        order = torch.randperm(n_train, device=device, generator=generator)
        total = torch.zeros((), device=device)
        for step in range(steps):
            x = train[order[step * batch:(step + 1) * batch]]
            with autocast:
                _, loss = model(x)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.detach() * x.shape[0]
        history.append(total.item() / n_train)  # sync point: once per epoch
        if progress:
            progress((epoch + 1) / cfg.epochs, f"epoch {epoch + 1}/{cfg.epochs}, loss {history[-1]:.2f}")
    model.eval()
    return model, history
