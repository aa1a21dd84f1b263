"""Real handwritten digits for the demo data: the UCI 8x8 set shipped by sklearn.

``sklearn.datasets.load_digits()`` reads the 1797 digits from the installed
package (no network). They are split once, per class, into a training pool and
a held-out pool so that no handwritten sample appears in both the training and
the validation/test videos.
"""

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

NUM_DIGIT_CLASSES = 10
# Pool names: training videos draw from "train", val/test videos from "heldout".
POOLS = ("train", "heldout")


@dataclass(frozen=True)
class DigitBank:
    """The digit images and their disjoint per-class sample pools.

    Attributes:
        images: (N, 8, 8) float32 intensities in [0, 1].
        labels: (N,) int64 digit classes 0-9.
        pools: pool name -> class -> indices into ``images``.
    """

    images: np.ndarray
    labels: np.ndarray
    pools: Dict[str, Dict[int, np.ndarray]]

    def sample(
        self, rng: np.random.Generator, pool: str, digit: Optional[int] = None
    ) -> Tuple[np.ndarray, int]:
        """Draws one handwritten sample.

        Args:
            rng: the video's random generator.
            pool: "train" or "heldout".
            digit: the class to draw; None draws a random class.

        Returns:
            (image, digit): the (8, 8) image in [0, 1] and its class.
        """
        if pool not in self.pools:
            raise ValueError(f"digit pool {pool!r} unknown; expected one of {POOLS}")
        if digit is None:
            digit = int(rng.integers(NUM_DIGIT_CLASSES))
        indices = self.pools[pool][digit]
        return self.images[int(rng.choice(indices))], digit


def load_digit_bank(heldout_fraction: float = 0.3, seed: int = 0) -> DigitBank:
    """Loads sklearn's digits and splits every class into disjoint pools.

    Args:
        heldout_fraction: share of each class kept for val/test videos.
        seed: seed of the (stratified) split.

    Returns:
        DigitBank: images, labels and the "train"/"heldout" pools.
    """
    from sklearn.datasets import load_digits

    data = load_digits()
    images = (np.asarray(data.images, dtype=np.float32) / 16.0).clip(0.0, 1.0)
    labels = np.asarray(data.target, dtype=np.int64)
    rng = np.random.default_rng([seed, 1797])
    pools: Dict[str, Dict[int, np.ndarray]] = {name: {} for name in POOLS}
    for digit in range(NUM_DIGIT_CLASSES):
        members = rng.permutation(np.flatnonzero(labels == digit))
        n_heldout = max(1, int(round(len(members) * heldout_fraction)))
        pools["heldout"][digit] = np.sort(members[:n_heldout])
        pools["train"][digit] = np.sort(members[n_heldout:])
    return DigitBank(images=images, labels=labels, pools=pools)


def upscale_digit(image: np.ndarray, size: int) -> torch.Tensor:
    """Upscales an 8x8 digit bilinearly into a sprite with a zero border.

    One zero pixel is padded on every side before upscaling so that strokes
    touching the 8x8 border fade out instead of ending in a hard edge.

    Args:
        image: (8, 8) intensities in [0, 1].
        size: side of the returned sprite in pixels.

    Returns:
        torch.Tensor: (size, size) float32 alpha mask in [0, 1].
    """
    padded = np.pad(image, 1)
    tensor = torch.from_numpy(np.ascontiguousarray(padded, dtype=np.float32))
    sprite = F.interpolate(
        tensor[None, None], size=(size, size), mode="bilinear", align_corners=False
    )[0, 0]
    return sprite.clamp_(0.0, 1.0)
