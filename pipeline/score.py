"""Outlier scores and latent positions of every beat; decoded samples over the latent plane.

See Also
--------
pipeline.train.fit_vae : the previous step.
pipeline.results.write_run : the next step.
"""
from __future__ import annotations

import torch

from pipeline.model import VAE, negative_elbo


@torch.no_grad()
def score_beats(model: VAE, rows: torch.Tensor, batch_size: int = 16384) -> tuple[torch.Tensor, torch.Tensor]:
    """Outlier score (negative ELBO at the posterior mean) and latent mean z of each row.

    Returns ``(score (n,), z (n, latent_dim))`` as float32 tensors on ``rows``' device.
    """
    scores, latents = [], []
    for chunk in rows.split(batch_size):
        mu, logvar = model.encode(chunk)
        recon = model.decode(mu)
        scores.append(negative_elbo(chunk, recon, mu, logvar, model.cfg.beta))
        latents.append(mu)
    if not scores:
        empty = rows.new_zeros((0,))
        return empty, rows.new_zeros((0, model.cfg.latent_dim))
    return torch.cat(scores).float(), torch.cat(latents).float()


@torch.no_grad()
def decode(model: VAE, z: torch.Tensor) -> torch.Tensor:
    """Decoder output for latent points ``z`` (n, latent_dim) → (n, width)."""
    return model.decode(z.to(next(model.parameters()).device, torch.float32)).float()


@torch.no_grad()
def latent_grid(z: torch.Tensor, size: int = 3, coverage: float = 0.9) -> torch.Tensor:
    """``size`` × ``size`` points spanning the central ``coverage`` of the beats' latent positions
    (row-major, z2 descending so that it reads like the scatter plot)."""
    lo, hi = (1 - coverage) / 2, 1 - (1 - coverage) / 2
    q = torch.quantile(z[:, :2].float().cpu(), torch.tensor([lo, hi]), dim=0)
    z1 = torch.linspace(float(q[0, 0]), float(q[1, 0]), size)
    z2 = torch.linspace(float(q[1, 1]), float(q[0, 1]), size)
    g2, g1 = torch.meshgrid(z2, z1, indexing="ij")
    return torch.stack([g1.reshape(-1), g2.reshape(-1)], dim=1)
