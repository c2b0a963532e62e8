"""Which beams survive a beam-search step, on the sim: an explicit, seeded model.

The sim has no logits, so it cannot rank candidates. After each step of a
request of beam width w, new beam i (beams are kept in score order, rank 0
the best) first continues old beam i itself with probability `persistence`;
otherwise it picks the old beam it extends with probability proportional to
`decay ** rank` (decay = 1: uniformly; decay -> 0: the best one). After the
prompt's prefill every beam extends the prompt. The draws come from a
generator seeded by (seed, request id), so every engine sees the same beams
for the same request, step by step.

Persistence is how long lineages last. With none, parents are drawn
independently every step and lineages merge within a few steps, so beams
share nearly their whole history; a trained model's beams mostly extend
themselves and split less often. The default persistence is an ASSUMPTION,
not a measurement: it is calibrated (`python -m pagedbench.studies.beam_persistence`)
so that the paged engine's memory saving on Alpaca matches the paper's
Figure 15 (37.6 / 53.1 / 55.2% at width 2 / 4 / 6, OPT-13B), because no
trained model's beams can be had offline here; the savings are then an
input, and the capacity ratios are what the figure tests.

`python -m pagedbench.studies.beam_check` fits `decay` to the parents a real beam
search chooses (maximum likelihood over a grid) and compares the memory
saving the two produce on the same lengths.
"""
from __future__ import annotations

import itertools
import random

import numpy as np


class BeamModel:
    def __init__(self, decay: float = 1.0, seed: int = 0, persistence: float = 0.0):
        if not 0 < decay <= 1:
            raise ValueError(f"beam parent decay must be in (0, 1], got {decay!r}")
        if not 0 <= persistence <= 1:
            raise ValueError(f"beam persistence must be in [0, 1], got {persistence!r}")
        self.decay, self.seed, self.persistence = decay, seed, persistence
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
        if not self.persistence:
            return sorted(rng.choices(range(width), cum_weights=cumulative, k=width))
        drawn = rng.choices(range(width), cum_weights=cumulative, k=width)
        stays = [rng.random() < self.persistence for _ in range(width)]
        return sorted(own if stay else parent for own, (stay, parent) in enumerate(zip(stays, drawn)))

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
