"""The probe's GAN in PyTorch (CPU or CUDA): the same MLPs, hinge loss and Adam as `gan_numpy`.

A checkpoint is one `torch.save` file of BigGAN's pieces (G, D, G_optim, D_optim state dicts,
the trainer's state in `meta`) plus the GAN's own noise generator state; one file, so that
replacing it is one atomic step. It is read back with `weights_only=True`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

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
        torch.manual_seed(seed)  # the nets' initialisation
        self.device = device
        # Training noise from a generator of its own: its state is saved, and evaluation does not touch it.
        self.noise = torch.Generator(device=device)
        self.noise.manual_seed(seed)
        self.dim_z = dim_z
        self.generator = _mlp([dim_z] + [width] * depth + [data_dim], tanh_output=True, device=device)
        self.discriminator = _mlp([data_dim] + [width] * depth + [1], tanh_output=False, device=device)
        self.g_opt = torch.optim.Adam(self.generator.parameters(), g_lr, betas=(betas[0], betas[1]), eps=adam_eps)
        self.d_opt = torch.optim.Adam(self.discriminator.parameters(), d_lr, betas=(betas[2], betas[3]), eps=adam_eps)

    def _z(self, n: int, noise: torch.Generator | None = None) -> torch.Tensor:
        return torch.randn(n, self.dim_z, device=self.device, generator=self.noise if noise is None else noise)

    def sample(self, n: int, seed: int | None = None) -> NDArray[np.float64]:
        """n generated rows; with `seed`, from noise of its own (evaluation leaves training's RNG alone)."""
        noise = None
        if seed is not None:
            noise = torch.Generator(device=self.device)
            noise.manual_seed(seed)
        with torch.no_grad():
            out: Any = self.generator(self._z(n, noise)).double().cpu().numpy()
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

    def write_checkpoint(self, file: IO[bytes], meta: Mapping[str, Any]) -> None:
        torch.save(
            {
                "G": self.generator.state_dict(),
                "D": self.discriminator.state_dict(),
                "G_optim": self.g_opt.state_dict(),
                "D_optim": self.d_opt.state_dict(),
                "noise": self.noise.get_state(),
                # JSON text: the data-order RNG's 128-bit state stays exact and weights_only can read it.
                "meta": json.dumps(dict(meta)),
            },
            file,
        )

    @staticmethod
    def read_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the trainer's meta, the state dicts); tensors on the CPU until loaded into the nets."""
        payload = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(payload, dict) or not isinstance(payload.get("meta"), str):
            raise ValueError(f"{path}: not a probe checkpoint")
        meta = json.loads(payload.pop("meta"))
        if not isinstance(meta, dict):
            raise ValueError(f"{path}: meta is not an object")
        return meta, payload

    def load_checkpoint(self, payload: Mapping[str, Any]) -> None:
        self.generator.load_state_dict(payload["G"])
        self.discriminator.load_state_dict(payload["D"])
        self.g_opt.load_state_dict(payload["G_optim"])
        self.d_opt.load_state_dict(payload["D_optim"])
        self.noise.set_state(payload["noise"])
