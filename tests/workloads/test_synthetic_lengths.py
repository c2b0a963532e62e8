import numpy as np
import pytest

from pagedbench.workloads import LengthDist, WorkloadConfig, build_workload
from pagedbench.workloads.alpaca_synthetic import OUTPUT_MEAN, PROMPT_MEAN, lognormal_mu_for_truncated_mean
from pagedbench.workloads.synthetic import VOCAB_SIZE


def test_fixed_dist():
    assert LengthDist(kind="fixed", value=7).sample(5, np.random.default_rng(0)).tolist() == [7] * 5


def test_uniform_dist_includes_both_ends():
    draws = LengthDist(kind="uniform", low=3, high=6).sample(2000, np.random.default_rng(0))
    assert set(draws.tolist()) == {3, 4, 5, 6}


def test_lognormal_dist_has_the_arithmetic_mean():
    draws = LengthDist(kind="lognormal", mean=200.0, sigma=0.5).sample(200_000, np.random.default_rng(0))
    assert draws.min() >= 1
    assert draws.mean() == pytest.approx(200.0, rel=0.01)


def test_lognormal_dist_clips_to_one():
    draws = LengthDist(kind="lognormal", mean=1.0, sigma=2.0).sample(10_000, np.random.default_rng(0))
    assert draws.min() == 1


@pytest.mark.parametrize("target, sigma", [(19.31, 0.6), (58.45, 1.0), (10.0, 1.5)])
def test_truncated_mean_solver(target, sigma):
    mu = lognormal_mu_for_truncated_mean(target, sigma, 3.5)
    x = np.random.default_rng(1).lognormal(mu, sigma, size=400_000)
    assert x[x >= 3.5].mean() == pytest.approx(target, rel=0.01)


def test_synthetic_alpaca_matches_figure_11_means():
    """Means of the filtered pool: 19.31 prompt and 58.45 output tokens."""
    trace = build_workload(WorkloadConfig(name="alpaca", num_requests=50_000))
    prompt = np.array([r.prompt_len for r in trace])
    output = np.array([r.output_len for r in trace])
    assert prompt.min() >= 4 and output.min() >= 4
    assert prompt.mean() == pytest.approx(PROMPT_MEAN, rel=0.02)
    assert output.mean() == pytest.approx(OUTPUT_MEAN, rel=0.02)


def test_synthetic_workload_uses_its_distributions():
    cfg = WorkloadConfig.from_dict({
        "name": "synthetic", "num_requests": 300, "seed": 3,
        "prompt_dist": {"kind": "uniform", "low": 10, "high": 20},
        "output_dist": {"kind": "fixed", "value": 64},
    })
    trace = build_workload(cfg)
    assert len(trace) == 300
    assert all(10 <= r.prompt_len <= 20 and r.output_len == 64 for r in trace)
    ids = np.concatenate([r.prompt_token_ids for r in trace])
    assert ids.min() >= 0 and ids.max() < VOCAB_SIZE
    assert len(np.unique(ids)) > 1000  # random ids, not a constant
