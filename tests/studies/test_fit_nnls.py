"""The fit's NNLS against the exact answer: of the unconstrained least-squares fits on every subset of
the columns, the best whose coefficients are all >= 0 (the NNLS optimum is one of them). Checked on
designs whose columns differ in scale by 1e6 and more, as the relative-error design of a real profile
does, and on the committed CPU profile replicated with measurement noise."""
import itertools

import numpy as np
import pandas as pd
import pytest

from pagedbench.paths import PROFILES
from pagedbench.studies.fit import FEATURES, design_matrix, fit, nnls

PROFILE = PROFILES / "cpu_tiny.parquet"


def nnls_by_enumeration(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """argmin ||a x - b|| over x >= 0 by trying all 2^n supports; the coefficients and the residual."""
    n = a.shape[1]
    scale = np.linalg.norm(a, axis=0)           # unit columns, so lstsq's cutoff never sees the scale
    unit = a / scale
    best, best_residual = np.zeros(n), float(np.linalg.norm(b))
    for k in range(1, n + 1):
        for cols in map(list, itertools.combinations(range(n), k)):
            z = np.linalg.lstsq(unit[:, cols], b, rcond=None)[0]
            residual = float(np.linalg.norm(unit[:, cols] @ z - b))
            if (z >= 0).all() and residual < best_residual:
                best, best_residual = np.zeros(n), residual
                best[cols] = z
    return best / scale, best_residual


def assert_same_solution(a, b, got, reference, residual):
    """Equal to the reference in each column's own units, and no worse a residual."""
    scale = np.linalg.norm(a, axis=0)
    assert (got >= 0).all()
    assert got * scale == pytest.approx(reference * scale, rel=1e-6, abs=1e-9 * np.max(reference * scale))
    assert np.linalg.norm(a @ got - b) == pytest.approx(residual, rel=1e-9)


def badly_scaled_design(seed: int, m: int = 60, n: int = 6):
    """Columns whose scales span 1e6 (or 1e9) against a target of order 1, as in a profile's relative-error
    design, and a target that the best fit wants some negative weight for."""
    rng = np.random.default_rng(seed)
    scales = 10.0 ** rng.permutation(np.linspace(0, 9 if seed % 2 else 6, n))
    a = rng.random((m, n)) * scales
    x = rng.uniform(-0.5, 1.0, n) / scales
    b = (a @ x) / np.abs(a @ x).mean() + 0.01 * rng.standard_normal(m)
    return a, b


@pytest.mark.parametrize("seed", range(24))
def test_nnls_equals_enumeration_on_badly_scaled_designs(seed):
    a, b = badly_scaled_design(seed)
    reference, residual = nnls_by_enumeration(a, b)
    assert_same_solution(a, b, nnls(a, b), reference, residual)


@pytest.mark.parametrize("shift", [1e-6, 1.0, 1e6])
def test_nnls_is_unchanged_by_the_scale_of_the_data(shift):
    a, b = badly_scaled_design(3)
    reference, residual = nnls_by_enumeration(a, b)
    assert_same_solution(a * shift, b, nnls(a * shift, b), reference / shift, residual)
    assert_same_solution(a, b, nnls(a, b * shift) / shift, reference, residual)


def replicated_profile(copies: int = 5, noise: float = 0.03, seed: int = 0) -> pd.DataFrame:
    """The committed profile measured `copies` times, each time with a few percent of noise."""
    df = pd.read_parquet(PROFILE)
    big = pd.concat([df] * copies, ignore_index=True)
    rng = np.random.default_rng(seed)
    big["time_s"] = big["time_s"] * (1 + noise * rng.standard_normal(len(big)))
    return big


@pytest.mark.parametrize("copies", [1, 5, 20])
def test_fit_of_a_replicated_noisy_profile_is_the_exact_nnls(copies):
    df = replicated_profile(copies)
    coef, residuals = fit(df)                   # larger profiles once dropped every term and crashed
    t = df["time_s"].to_numpy()
    a, b = design_matrix(df) / t[:, None], np.ones(len(t))
    reference, residual = nnls_by_enumeration(a, b)
    got = np.array([coef[k] for k in FEATURES])
    assert_same_solution(a, b, got, reference, residual)
    assert residuals["rows"] == 108 * copies and residuals["mape"] < 0.2
