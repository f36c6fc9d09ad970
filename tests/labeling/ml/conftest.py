"""Helpers for the pure expert-discovery tests: embeddings with known structure."""

import numpy as np


def blobs_on_sphere(n_per=150, centers=6, dim=32, spread=0.08, seed=0):
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(centers, dim))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    x = np.concatenate([c[i] + spread * rng.normal(size=(n_per, dim)) for i in range(centers)])
    y = np.repeat(np.arange(centers), n_per)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), y
