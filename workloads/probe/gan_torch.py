"""The probe's GAN in PyTorch (CPU or CUDA): the same MLPs, hinge loss and Adam as `gan_numpy`."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

LEAK = 0.2


def _mlp(sizes: list[int], tanh_output: bool, device: str) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        # Made on the device: initialising wide layers on the CPU first takes seconds.
        layers.append(nn.Linear(a, b, device=device))
        if i < len(sizes) - 2:
            layers.append(nn.LeakyReLU(LEAK))
    if tanh_output:
        layers.append(nn.Tanh())
    return nn.Sequential(*layers)


class TorchGan:
    backend = "torch"

    def __init__(
        self,
        data_dim: int,
        dim_z: int,
        width: int,
        depth: int,
        g_lr: float,
        d_lr: float,
        betas: tuple[float, float, float, float],
        adam_eps: float,
        seed: int,
        device: str,
    ) -> None:
        torch.manual_seed(seed)
        self.device = device
        self.dim_z = dim_z
        self.generator = _mlp([dim_z] + [width] * depth + [data_dim], tanh_output=True, device=device)
        self.discriminator = _mlp([data_dim] + [width] * depth + [1], tanh_output=False, device=device)
        self.g_opt = torch.optim.Adam(self.generator.parameters(), g_lr, betas=(betas[0], betas[1]), eps=adam_eps)
        self.d_opt = torch.optim.Adam(self.discriminator.parameters(), d_lr, betas=(betas[2], betas[3]), eps=adam_eps)

    def _z(self, n: int) -> torch.Tensor:
        return torch.randn(n, self.dim_z, device=self.device)

    def sample(self, n: int) -> NDArray[np.float64]:
        with torch.no_grad():
            out: Any = self.generator(self._z(n)).double().cpu().numpy()
        return np.asarray(out)

    def discriminator_step(self, real: NDArray[np.float64]) -> tuple[float, float]:
        real_t = torch.as_tensor(real, dtype=torch.float32, device=self.device)
        with torch.no_grad():
            fake = self.generator(self._z(len(real)))
        loss_real = torch.relu(1 - self.discriminator(real_t)).mean()
        loss_fake = torch.relu(1 + self.discriminator(fake)).mean()
        self.d_opt.zero_grad(set_to_none=True)
        (loss_real + loss_fake).backward()
        self.d_opt.step()
        return float(loss_real.item()), float(loss_fake.item())

    def generator_step(self, n: int) -> float:
        for p in self.discriminator.parameters():
            p.requires_grad_(False)
        loss = -self.discriminator(self.generator(self._z(n))).mean()
        self.g_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.g_opt.step()
        for p in self.discriminator.parameters():
            p.requires_grad_(True)
        return float(loss.item())
