"""The probe's stand-in for Inception: a feature model fitted on the real digits.

BigGAN scores samples with Inception v3: features (pool3) for FID, class probabilities for
IS. Inception cannot be downloaded here and knows nothing of 8x8 digits, so the probe fits
its own small, deterministic model in the `inception-moments` step and stores it in the
moments file beside mu and sigma: a PCA projection (features, for a Frechet distance) and a
softmax classifier over the ten digits (probabilities, for an Inception-like score). Both
are NumPy only, so every backend scores samples the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
FEATURE_DIM = 16
NUM_CLASSES = 10


@dataclass(frozen=True)
class FeatureModel:
    pca_mean: Array  # (D,)
    projection: Array  # (D, FEATURE_DIM)
    classifier_w: Array  # (D, NUM_CLASSES)
    classifier_b: Array  # (NUM_CLASSES,)


def images_to_unit(images: NDArray[np.uint8]) -> Array:
    """uint8 images (N, H, W) -> float rows in [-1, 1], the generator's output range."""
    return images.reshape(len(images), -1).astype(np.float64) / 127.5 - 1.0


def _softmax(logits: Array) -> Array:
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return np.asarray(exp / exp.sum(axis=1, keepdims=True))


def fit_feature_model(x: Array, labels: NDArray[np.int64], steps: int = 300, lr: float = 0.5) -> FeatureModel:
    """PCA by SVD and a full-batch softmax regression: deterministic, no seed needed."""
    mean = x.mean(axis=0)
    _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
    projection = vt[:FEATURE_DIM].T.copy()
    w = np.zeros((x.shape[1], NUM_CLASSES))
    b = np.zeros(NUM_CLASSES)
    onehot = np.eye(NUM_CLASSES)[labels]
    for _ in range(steps):
        grad = (_softmax(x @ w + b) - onehot) / len(x)
        w -= lr * (x.T @ grad + 1e-4 * w)
        b -= lr * grad.sum(axis=0)
    return FeatureModel(pca_mean=mean, projection=projection, classifier_w=w, classifier_b=b)


def features(model: FeatureModel, x: Array) -> Array:
    return np.asarray((x - model.pca_mean) @ model.projection)


def class_probabilities(model: FeatureModel, x: Array) -> Array:
    return _softmax(x @ model.classifier_w + model.classifier_b)


def classifier_accuracy(model: FeatureModel, x: Array, labels: NDArray[np.int64]) -> float:
    return float((class_probabilities(model, x).argmax(axis=1) == labels).mean())


def moments(feats: Array) -> tuple[Array, Array]:
    return feats.mean(axis=0), np.cov(feats, rowvar=False)


def _sqrt_psd(matrix: Array) -> Array:
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2)
    return np.asarray((vectors * np.sqrt(np.clip(values, 0, None))) @ vectors.T)


def frechet_distance(mu1: Array, sigma1: Array, mu2: Array, sigma2: Array) -> float:
    """||mu1-mu2||^2 + Tr(S1 + S2 - 2 (S1 S2)^1/2), BigGAN's FID formula, without scipy.

    Tr((S1 S2)^1/2) equals the sum of the square roots of the eigenvalues of
    S1^1/2 S2 S1^1/2, which is symmetric, so `eigh` suffices.
    """
    root1 = _sqrt_psd(sigma1)
    inner = np.linalg.eigvalsh(root1 @ sigma2 @ root1)
    trace_sqrt = float(np.sqrt(np.clip(inner, 0, None)).sum())
    diff = mu1 - mu2
    return float(diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2 * trace_sqrt)


def inception_like_score(probabilities: Array, splits: int = 10) -> tuple[float, float]:
    """exp(E_x KL(p(y|x) || p(y))) over `splits` chunks, as BigGAN's inception_utils does."""
    scores = []
    for chunk in np.array_split(probabilities, splits):
        marginal = chunk.mean(axis=0, keepdims=True)
        kl = chunk * (np.log(chunk + 1e-12) - np.log(marginal + 1e-12))
        scores.append(np.exp(kl.sum(axis=1).mean()))
    return float(np.mean(scores)), float(np.std(scores))
