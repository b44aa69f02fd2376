"""The probe's GAN in NumPy: the same MLPs, hinge loss and Adam as `gan_torch`, backpropagated by hand.

It exists so the probe trains wherever Atlas runs without PyTorch (a 3 GB download with its
CUDA wheels): the local "login node" and CI. float64 throughout: the nets are tiny.

A checkpoint is one `.npz` (no pickle): both nets' parameters, both optimizers' Adam moments and
step counts, the GAN's random generator state and the trainer's `meta` (JSON text).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
LEAK = 0.2  # LeakyReLU slope, as in BigGAN's D nonlinearity family


@dataclass
class Adam:
    lr: float
    beta1: float
    beta2: float
    eps: float
    step: int = 0
    first: list[Array] = field(default_factory=list)
    second: list[Array] = field(default_factory=list)

    def update(self, params: list[Array], grads: list[Array]) -> None:
        if not self.first:
            self.first = [np.zeros_like(p) for p in params]
            self.second = [np.zeros_like(p) for p in params]
        self.step += 1
        correction1 = 1 - self.beta1**self.step
        correction2 = 1 - self.beta2**self.step
        for p, g, m, v in zip(params, grads, self.first, self.second, strict=True):
            m *= self.beta1
            m += (1 - self.beta1) * g
            v *= self.beta2
            v += (1 - self.beta2) * g * g
            p -= self.lr * (m / correction1) / (np.sqrt(v / correction2) + self.eps)

    def arrays(self, prefix: str) -> dict[str, NDArray[Any]]:
        out: dict[str, NDArray[Any]] = {f"{prefix}.step": np.asarray(self.step, dtype=np.int64)}
        for i, (m, v) in enumerate(zip(self.first, self.second, strict=True)):
            out[f"{prefix}.first.{i}"] = m
            out[f"{prefix}.second.{i}"] = v
        return out

    def load_arrays(self, arrays: Mapping[str, NDArray[Any]], prefix: str) -> None:
        self.step = int(arrays[f"{prefix}.step"])
        count = sum(1 for key in arrays if key.startswith(f"{prefix}.first."))
        self.first = [np.array(arrays[f"{prefix}.first.{i}"], dtype=np.float64) for i in range(count)]
        self.second = [np.array(arrays[f"{prefix}.second.{i}"], dtype=np.float64) for i in range(count)]


class Mlp:
    """Linear layers with LeakyReLU between them; `tanh_output` for the generator."""

    def __init__(self, sizes: list[int], tanh_output: bool, rng: np.random.Generator) -> None:
        # PyTorch's nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        self.weights = [rng.uniform(-1, 1, (a, b)) / np.sqrt(a) for a, b in itertools.pairwise(sizes)]
        self.biases = [rng.uniform(-1, 1, b) / np.sqrt(a) for a, b in itertools.pairwise(sizes)]
        self.tanh_output = tanh_output

    @property
    def params(self) -> list[Array]:
        return self.weights + self.biases

    def forward(self, x: Array) -> tuple[Array, list[Array]]:
        """Output and the per-layer inputs/pre-activations that `backward` needs."""
        cache = [x]
        h = x
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            pre = h @ w + b
            cache.append(pre)
            h = (np.tanh(pre) if self.tanh_output else pre) if i == last else np.where(pre > 0, pre, LEAK * pre)
        return h, cache

    def backward(self, out: Array, cache: list[Array], grad_out: Array) -> tuple[Array, list[Array]]:
        """Gradient w.r.t. the input and the parameters (in `params` order)."""
        last = len(self.weights) - 1
        grad_w: list[Array] = [np.empty(0)] * len(self.weights)
        grad_b: list[Array] = [np.empty(0)] * len(self.weights)
        grad = grad_out * (1 - out * out) if self.tanh_output else grad_out
        for i in range(last, -1, -1):
            layer_in = cache[0] if i == 0 else _leaky(cache[i])
            grad_w[i] = layer_in.T @ grad
            grad_b[i] = grad.sum(axis=0)
            grad = grad @ self.weights[i].T
            if i > 0:
                grad = grad * np.where(cache[i] > 0, 1.0, LEAK)
        return grad, grad_w + grad_b


def _leaky(pre: Array) -> Array:
    return np.asarray(np.where(pre > 0, pre, LEAK * pre))


def _load_params(params: list[Array], arrays: Mapping[str, NDArray[Any]], prefix: str) -> None:
    """Copy saved parameters into the live arrays (Adam updates them in place)."""
    for i, param in enumerate(params):
        saved = arrays[f"{prefix}.{i}"]
        if saved.shape != param.shape:
            raise ValueError(f"{prefix}.{i}: saved shape {saved.shape}, the net has {param.shape}")
        param[...] = saved


class NumpyGan:
    backend = "numpy"
    device = "cpu"

    def __init__(
        self,
        data_dim: int,
        dim_z: int,
        width: int,
        depth: int,
        g_lr: float,
        d_lr: float,
        betas: tuple[float, float, float, float],  # G_B1, G_B2, D_B1, D_B2
        adam_eps: float,
        seed: int,
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.dim_z = dim_z
        self.generator = Mlp([dim_z] + [width] * depth + [data_dim], tanh_output=True, rng=self.rng)
        self.discriminator = Mlp([data_dim] + [width] * depth + [1], tanh_output=False, rng=self.rng)
        self.g_opt = Adam(g_lr, betas[0], betas[1], adam_eps)
        self.d_opt = Adam(d_lr, betas[2], betas[3], adam_eps)

    def sample(self, n: int, seed: int | None = None) -> Array:
        """n generated rows; with `seed`, from noise of its own (evaluation leaves training's RNG alone)."""
        rng = self.rng if seed is None else np.random.default_rng(seed)
        out, _ = self.generator.forward(rng.standard_normal((n, self.dim_z)))
        return out

    def discriminator_step(self, real: Array) -> tuple[float, float]:
        """One D update with BigGAN's hinge loss; returns (D_loss_real, D_loss_fake)."""
        n = len(real)
        fake = self.sample(n)
        d = self.discriminator
        out_real, cache_real = d.forward(real)
        out_fake, cache_fake = d.forward(fake)
        loss_real = float(np.maximum(0, 1 - out_real).mean())
        loss_fake = float(np.maximum(0, 1 + out_fake).mean())
        _, grads_real = d.backward(out_real, cache_real, -((1 - out_real) > 0).astype(np.float64) / n)
        _, grads_fake = d.backward(out_fake, cache_fake, ((1 + out_fake) > 0).astype(np.float64) / n)
        self.d_opt.update(d.params, [a + b for a, b in zip(grads_real, grads_fake, strict=True)])
        return loss_real, loss_fake

    def generator_step(self, n: int) -> float:
        """One G update: minimise -D(G(z)); D's parameters are not changed."""
        z = self.rng.standard_normal((n, self.dim_z))
        fake, cache_g = self.generator.forward(z)
        out, cache_d = self.discriminator.forward(fake)
        grad_fake, _ = self.discriminator.backward(out, cache_d, np.full_like(out, -1.0 / n))
        _, grads_g = self.generator.backward(fake, cache_g, grad_fake)
        self.g_opt.update(self.generator.params, grads_g)
        return float(-out.mean())

    def write_checkpoint(self, file: IO[bytes], meta: Mapping[str, Any]) -> None:
        """Everything an exact continuation needs, as one .npz written to `file`."""
        arrays: dict[str, NDArray[Any]] = {
            "meta": np.asarray(json.dumps(dict(meta))),
            # PCG64's state holds 128-bit integers: JSON keeps them exact, no pickle needed.
            "rng": np.asarray(json.dumps(self.rng.bit_generator.state)),
        }
        for name, net in (("G", self.generator), ("D", self.discriminator)):
            arrays.update({f"{name}.{i}": p for i, p in enumerate(net.params)})
        arrays.update(self.g_opt.arrays("G_optim"))
        arrays.update(self.d_opt.arrays("D_optim"))
        np.savez(file, **arrays)  # type: ignore[arg-type]

    @staticmethod
    def read_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, NDArray[Any]]]:
        """(the trainer's meta, the GAN's arrays) from a checkpoint written by `write_checkpoint`."""
        with np.load(path, allow_pickle=False) as f:
            arrays = {key: f[key] for key in f.files}
        meta = json.loads(str(arrays.pop("meta")))
        if not isinstance(meta, dict):
            raise ValueError(f"{path}: meta is not an object")
        return meta, arrays

    def load_checkpoint(self, arrays: Mapping[str, NDArray[Any]]) -> None:
        _load_params(self.generator.params, arrays, "G")
        _load_params(self.discriminator.params, arrays, "D")
        self.g_opt.load_arrays(arrays, "G_optim")
        self.d_opt.load_arrays(arrays, "D_optim")
        self.rng.bit_generator.state = json.loads(str(arrays["rng"]))
