import numpy as np
import pytest

from pagedbench.workloads.arrivals import arrival_times

N = 20_001  # 20k gaps


def gaps(process, rate, burstiness=1.0, seed=0):
    times = np.array(arrival_times(N, process, rate, burstiness, np.random.default_rng(seed)))
    assert times[0] == 0.0 and np.all(np.diff(times) >= 0) and len(times) == N
    return np.diff(times)


def test_offline_is_all_at_zero():
    assert arrival_times(4, "offline", float("inf"), 1.0, np.random.default_rng(0)) == [0.0] * 4


def test_small_traces():
    rng = np.random.default_rng(0)
    assert arrival_times(0, "poisson", 1.0, 1.0, rng) == []
    assert arrival_times(1, "poisson", 1.0, 1.0, rng) == [0.0]


@pytest.mark.parametrize("rate", [0.5, 2.0, 30.0])
def test_poisson_mean_gap_is_one_over_rate(rate):
    g = gaps("poisson", rate)
    # the mean of 20k exponential gaps has relative sd 0.7%
    assert g.mean() == pytest.approx(1 / rate, rel=0.04)
    assert g.var() / g.mean() ** 2 == pytest.approx(1.0, rel=0.08)


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 2.0, 4.0])
def test_gamma_cv_squared_is_one_over_burstiness(burstiness):
    g = gaps("gamma", 4.0, burstiness)
    assert g.mean() == pytest.approx(0.25, rel=0.05)
    assert g.var() / g.mean() ** 2 == pytest.approx(1 / burstiness, rel=0.1)


def test_burstier_is_burstier():
    assert np.var(gaps("gamma", 4.0, 0.25)) > 4 * np.var(gaps("gamma", 4.0, 4.0))


@pytest.mark.parametrize(
    "process, rate, burstiness, message",
    [
        ("poisson", float("inf"), 1.0, "finite rate > 0"),
        ("gamma", 0.0, 1.0, "finite rate > 0"),
        ("gamma", 1.0, 0.0, "burstiness must be finite"),
        ("uniform", 1.0, 1.0, "must be 'offline', 'poisson' or 'gamma'"),
    ],
)
def test_errors(process, rate, burstiness, message):
    with pytest.raises(ValueError, match=message):
        arrival_times(5, process, rate, burstiness, np.random.default_rng(0))
