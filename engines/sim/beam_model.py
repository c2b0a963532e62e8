"""Which beams survive a beam-search step, on the sim: an explicit, seeded model.

The sim has no logits, so it cannot rank candidates. After each step of a
request of beam width w, every new beam picks the old beam it extends,
independently, with probability proportional to `decay ** rank` (rank 0 is
the best old beam; beams are kept in score order). decay = 1 draws parents
uniformly; decay -> 0 makes every new beam extend the best one. After the
prompt's prefill every beam extends the prompt. The draws come from a
generator seeded by (seed, request id), so every engine sees the same
beams for the same request, step by step.

`python -m studies.beam_check` fits `decay` to the parents a real beam
search chooses (maximum likelihood over a grid) and compares the memory
saving the two produce on the same lengths.
"""
from __future__ import annotations

import itertools
import random

import numpy as np


class BeamModel:
    def __init__(self, decay: float = 1.0, seed: int = 0):
        if not 0 < decay <= 1:
            raise ValueError(f"beam parent decay must be in (0, 1], got {decay!r}")
        self.decay, self.seed = decay, seed
        self._rngs: dict[int, random.Random] = {}
        self._cumulative: dict[int, list[float]] = {}

    def probabilities(self, width: int) -> np.ndarray:
        p = self.decay ** np.arange(width, dtype=np.float64)
        return p / p.sum()

    def parents(self, request_id: int, width: int) -> list[int]:
        """The old beam each of the `width` new beams extends, for the next step of this request."""
        rng = self._rngs.get(request_id)
        if rng is None:
            # A string seed is hashed the same way in every process: the draws depend on (seed, request) only.
            rng = self._rngs[request_id] = random.Random(f"beams:{self.seed}:{request_id}")
        cumulative = self._cumulative.get(width)
        if cumulative is None:
            cumulative = self._cumulative[width] = list(itertools.accumulate(self.probabilities(width).tolist()))
        return sorted(rng.choices(range(width), cum_weights=cumulative, k=width))

    def forget(self, request_id: int) -> None:
        self._rngs.pop(request_id, None)


def log_likelihood(ranks: np.ndarray, width: int, decay: float) -> float:
    """Log-likelihood of observed parent ranks (of beams of `width`) under `decay`."""
    p = decay ** np.arange(width, dtype=np.float64)
    p /= p.sum()
    counts = np.bincount(ranks, minlength=width)
    return float((counts * np.log(p)).sum())


def fit_decay(ranks: np.ndarray, width: int, grid: np.ndarray | None = None) -> float:
    """The decay in (0, 1] that makes the observed parent ranks most likely (grid search)."""
    if grid is None:
        grid = np.linspace(0.01, 1.0, 100)
    return float(max(grid, key=lambda d: log_likelihood(ranks, width, d)))
