"""The sim's beam model: seeded parent draws, and persistence (a new beam continuing its own rank's lineage)."""
import numpy as np
import pytest

from pagedbench.engines.sim.beam_model import BeamModel
from pagedbench.engines.sim.build import SimBackendConfig


def steps(model, width, n=3000, request=0):
    return [model.parents(request, width) for _ in range(n)]


def test_no_persistence_keeps_the_uniform_draws():
    # persistence 0 draws exactly what the model drew before persistence existed: runs stay comparable.
    import itertools
    import random
    rng = random.Random("beams:7:3")
    cum = list(itertools.accumulate([0.25] * 4))
    old = [sorted(rng.choices(range(4), cum_weights=cum, k=4)) for _ in range(50)]
    model = BeamModel(1.0, seed=7, persistence=0.0)
    assert [model.parents(3, 4) for _ in range(50)] == old


def test_full_persistence_never_merges_lineages():
    model = BeamModel(1.0, seed=0, persistence=1.0)
    assert all(p == [0, 1, 2, 3, 4, 5] for p in steps(model, 6, 200))


@pytest.mark.parametrize("persistence", [0.5, 0.9])
def test_persistence_is_the_share_of_beams_that_continue_themselves(persistence):
    # Uniform draws land on the beam's own rank 1/w of the time too: P(own) = rho + (1 - rho) / w.
    width = 4
    model = BeamModel(1.0, seed=1, persistence=persistence)
    draws = steps(model, width, 4000)
    distinct = np.mean([len(set(p)) for p in draws])
    none = np.mean([len(set(p)) for p in steps(BeamModel(1.0, seed=1), width, 4000)])
    assert distinct > none                       # fewer merges than independent draws
    identity = np.mean([p == list(range(width)) for p in draws])
    # Each new beam lands on its own rank with P(own); every beam doing so gives the identity (sorted).
    own = persistence + (1 - persistence) / width
    assert identity >= own ** width * 0.9


def test_persistence_out_of_range_is_refused():
    with pytest.raises(ValueError, match="persistence"):
        BeamModel(1.0, persistence=1.5)
    with pytest.raises(ValueError, match="backend.beam_persistence"):
        SimBackendConfig(beam_persistence=-0.1)
