"""Small MNIST-shaped data made here, so the tutorials run in the tests without a download.

The tutorials' own loaders (``tfds.load("mnist")``, ``tf.keras.datasets.*.load_data()``)
fetch tens of megabytes; these give arrays and datasets of the same shapes and types
(28x28 uint8 images, labels 0-9), with a learnable rule (the label is the brightest row
band), so a few steps of training visibly lower the loss.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


def mnist_arrays(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` 28x28 uint8 images and their uint8 labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n).astype("uint8")
    images = rng.integers(0, 80, size=(n, 28, 28)).astype("uint8")
    for i, label in enumerate(labels):
        images[i, 2 + 2 * label : 4 + 2 * label, :] = 255
    return images, labels


def load_data(n: int = 512) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Like ``tf.keras.datasets.mnist.load_data()``: ``(x_train, y_train), (x_test, y_test)``."""
    return mnist_arrays(n, seed=0), mnist_arrays(n // 4, seed=1)


@dataclasses.dataclass(frozen=True)
class _Split:
    num_examples: int


@dataclasses.dataclass(frozen=True)
class _Info:
    splits: dict[str, _Split]


def tfds_load(n: int = 512) -> tuple[dict[str, Any], _Info]:
    """Like ``tfds.load(name='mnist', with_info=True, as_supervised=True)``: datasets of (28, 28, 1) images."""
    import tensorflow as tf

    (x, y), (xt, yt) = load_data(n)
    datasets = {
        "train": tf.data.Dataset.from_tensor_slices((x[..., None], y.astype("int64"))),
        "test": tf.data.Dataset.from_tensor_slices((xt[..., None], yt.astype("int64"))),
    }
    return datasets, _Info({"train": _Split(len(x)), "test": _Split(len(xt))})
