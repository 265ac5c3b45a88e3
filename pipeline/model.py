"""A small convolutional variational autoencoder for fixed-length beats, with a 2-D latent space."""
from __future__ import annotations

import torch
from torch import nn

from pipeline.config import VAEConfig


class VAE(nn.Module):
    """Conv1d encoder (three stride-2 layers) → (mu, log variance); mirror-image decoder.

    ``forward(x)`` returns ``(reconstruction, loss)``; the loss is the batch mean of the negative
    ELBO: squared reconstruction error summed over the row plus ``beta`` × KL(q(z|x) ‖ N(0, I)).
    """

    def __init__(self, width: int, cfg: VAEConfig = VAEConfig()):
        super().__init__()
        if width % 2 ** len(cfg.channels):
            raise ValueError(f"width must be a multiple of {2 ** len(cfg.channels)} "
                             f"({len(cfg.channels)} stride-2 layers); got {width}")
        self.width, self.cfg = width, cfg
        channels = (1, *cfg.channels)
        reduced = width // 2 ** len(cfg.channels)
        flat = channels[-1] * reduced
        down = []
        for cin, cout in zip(channels, channels[1:]):
            down += [nn.Conv1d(cin, cout, 5, stride=2, padding=2), nn.LeakyReLU(0.1)]
        self.encoder = nn.Sequential(*down, nn.Flatten())
        self.to_latent = nn.Sequential(nn.Linear(flat, cfg.hidden), nn.LeakyReLU(0.1),
                                       nn.Linear(cfg.hidden, 2 * cfg.latent_dim))
        self.from_latent = nn.Sequential(nn.Linear(cfg.latent_dim, cfg.hidden), nn.LeakyReLU(0.1),
                                         nn.Linear(cfg.hidden, flat), nn.LeakyReLU(0.1))
        rising = channels[:0:-1]  # (64, 32, 16): back up through the encoder's widths
        up = []
        for cin, cout in zip(rising, (*rising[1:], rising[-1])):
            up += [nn.ConvTranspose1d(cin, cout, 4, stride=2, padding=1), nn.LeakyReLU(0.1)]
        self.decoder = nn.Sequential(nn.Unflatten(1, (channels[-1], reduced)), *up,
                                     nn.Conv1d(rising[-1], 1, 5, padding=2), nn.Flatten())

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, width) → mean and log variance of q(z|x), each (n, latent_dim)."""
        mu, logvar = self.to_latent(self.encoder(x.unsqueeze(1))).chunk(2, dim=1)
        return mu, logvar.clamp(-12.0, 8.0)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """(n, latent_dim) → (n, width)."""
        return self.decoder(self.from_latent(z))

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``noise``: the (n, latent_dim) standard normal draws of the reparameterisation; drawn
        here when not given (training passes them in, so that a captured step reads them from a
        buffer instead of drawing inside the graph)."""
        mu, logvar = self.encode(x)
        noise = torch.randn_like(mu) if noise is None else noise
        z = mu + noise * torch.exp(0.5 * logvar)
        recon = self.decode(z)
        return recon, negative_elbo(x, recon, mu, logvar, self.cfg.beta).mean()


def negative_elbo(x, recon, mu, logvar, beta: float = 1.0) -> torch.Tensor:
    """Per-row negative ELBO (up to constants): summed squared error + beta × KL, in float32."""
    error = (recon.float() - x.float()).pow(2).sum(dim=1)
    kl = -0.5 * (1 + logvar.float() - mu.float().pow(2) - logvar.float().exp()).sum(dim=1)
    return error + beta * kl
