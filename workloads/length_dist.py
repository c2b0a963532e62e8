"""A distribution of token counts, used by the synthetic workload."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

KINDS = ("fixed", "uniform", "lognormal")


@dataclass(slots=True)
class LengthDist:
    """How many tokens a synthetic prompt or output has.

    - fixed:     every draw is `value`.
    - uniform:   integers in [low, high], both ends included.
    - lognormal: `mean` is the arithmetic mean of the lengths (not of the
                 underlying normal) and `sigma` the standard deviation of the
                 underlying normal; draws are rounded and clipped to >= 1.
    """

    kind: str = "fixed"
    value: int | None = None
    low: int | None = None
    high: int | None = None
    mean: float | None = None
    sigma: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"LengthDist.kind must be one of {list(KINDS)}, got {self.kind!r}")
        if self.kind == "fixed":
            if self.value is None or self.value < 1:
                raise ValueError(f"LengthDist(kind='fixed') needs value >= 1, got value={self.value}")
        elif self.kind == "uniform":
            if self.low is None or self.high is None:
                raise ValueError("LengthDist(kind='uniform') needs both low and high")
            if not 1 <= self.low <= self.high:
                raise ValueError(
                    f"LengthDist(kind='uniform') needs 1 <= low <= high, got low={self.low} high={self.high}"
                )
        else:
            if self.mean is None or not (math.isfinite(self.mean) and self.mean > 0):
                raise ValueError(f"LengthDist(kind='lognormal') needs a finite mean > 0, got mean={self.mean}")
            if self.sigma is None or not (math.isfinite(self.sigma) and self.sigma >= 0):
                raise ValueError(
                    f"LengthDist(kind='lognormal') needs a finite sigma >= 0, got sigma={self.sigma}"
                )

    @classmethod
    def from_dict(cls, d: dict) -> LengthDist:
        valid = [f for f in cls.__dataclass_fields__]
        for key in d:
            if key not in valid:
                raise ValueError(f"unknown LengthDist key {key!r}; valid keys: {valid}")
        return cls(**d)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draw `n` lengths as an int64 array, every one >= 1."""
        if self.kind == "fixed":
            return np.full(n, self.value, dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)
        return lognormal_lengths(n, self.mean, self.sigma, rng)


def lognormal_lengths(n: int, mean: float, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Lengths whose arithmetic mean is `mean`: exp(N(mu, sigma^2)) with
    mu = ln(mean) - sigma^2 / 2, rounded to integers and clipped to >= 1."""
    mu = math.log(mean) - sigma * sigma / 2
    draws = rng.lognormal(mu, sigma, size=n)
    return np.maximum(np.rint(draws), 1).astype(np.int64)
