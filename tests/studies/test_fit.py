"""The cost model's fit: NNLS, recovery of known coefficients from a synthetic profile, the preset it
writes, the fitted model in the sim (the prefill-iteration term, older presets without it), and the
paged-kernel penalty of the datasheet presets. NNLS against exhaustive enumeration: test_fit_nnls.py."""
import dataclasses

import numpy as np
import pandas as pd
import pytest
import yaml

from pagedbench.engines.sim.build import build_cost_model
from pagedbench.engines.sim.cost_model import CostModel, blocks_read
from pagedbench.studies.fit import FEATURES, design_matrix, fit, nnls, write_preset
from pagedbench.engines.sim.linear_cost import OPTIONAL_TERMS, TERMS, LinearCostModel
from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.presets import load_hardware, load_model
from pagedbench.paths import CONF, PROFILES

TRUE = {"overhead_s": 3e-3, "prefill_iteration_s": 4e-3, "per_row_s": 2e-4, "per_token_s": 5e-5, "prefill_pair_s": 1e-8,
        "contiguous_ctx_s": 4e-7, "paged_ctx_s": 5e-7, "paged_block_s": 2e-6}


def synthetic_profile(noise=0.0, seed=0):
    """Profile rows as pagedbench.studies.profile writes them, timed by the TRUE linear model."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in (1, 2, 4, 8):
        for new in (16, 64, 256):
            rows.append(dict(kind="prefill", layout="contiguous", block_size=0, rows=n, tokens=n * new,
                             prefill_pairs=n * new * (new + 1), decode_ctx=0, decode_blocks=0))
    for layout, bs in (("contiguous", 0), ("paged", 1), ("paged", 16), ("paged", 256)):
        for batch in (1, 4, 16, 32):
            for ctx in (64, 256, 1000):
                blocks = batch * -(-ctx // bs) if bs else 0
                rows.append(dict(kind="decode", layout=layout, block_size=bs, rows=batch, tokens=batch,
                                 prefill_pairs=0, decode_ctx=batch * ctx, decode_blocks=blocks))
    df = pd.DataFrame(rows)
    t = design_matrix(df) @ np.array([TRUE[k] for k in FEATURES])
    df["time_s"] = t * (1 + noise * rng.standard_normal(len(t)))
    return df


def test_nnls_matches_least_squares_when_unconstrained_and_clips_otherwise():
    rng = np.random.default_rng(1)
    a = rng.random((40, 4))
    x = np.array([1.0, 2.0, 0.5, 3.0])
    assert nnls(a, a @ x) == pytest.approx(x, rel=1e-8)
    b = a @ np.array([1.0, -2.0, 0.5, 3.0])                 # the best fit wants a negative coefficient
    got = nnls(a, b)
    assert (got >= 0).all() and got[1] == 0


def test_fit_recovers_known_coefficients():
    coef, residuals = fit(synthetic_profile())
    for key, value in TRUE.items():
        assert coef[key] == pytest.approx(value, rel=1e-6), key
    assert residuals["mape"] < 1e-9 and residuals["rows"] == 60


def test_fit_is_close_under_measurement_noise():
    coef, residuals = fit(synthetic_profile(noise=0.03))
    for key in ("overhead_s", "per_token_s", "contiguous_ctx_s", "paged_ctx_s"):
        assert coef[key] == pytest.approx(TRUE[key], rel=0.15), key
    assert residuals["mape"] < 0.05


def test_written_preset_loads_and_times_like_the_fitted_model(tmp_path):
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "cpu.yaml").write_text((CONF / "hardware" / "cpu.yaml").read_text())
    coef, residuals = fit(synthetic_profile())
    env = {"model": "tiny", "dtype": "float32", "device": "cpu", "date": "2026-11-30"}
    out = write_preset(coef, residuals, env, tmp_path / "p.parquet", "cpu", "cpu-test", conf_dir=tmp_path)
    preset = yaml.safe_load(out.read_text())
    hw = HardwareSpec.from_dict(preset)
    assert hw.fitted["source"]["profile"].endswith("p.parquet") and hw.fitted["source"]["residuals"]["rows"] == 60
    tiny = load_model("tiny")
    paged, contiguous = build_cost_model(tiny, hw, 16), build_cost_model(tiny, hw)
    assert isinstance(paged, LinearCostModel)
    expected = (TRUE["overhead_s"] + 3 * TRUE["per_row_s"] + 3 * TRUE["per_token_s"]
                + TRUE["paged_ctx_s"] * 90 + TRUE["paged_block_s"] * (1 + 3 + 3))
    assert paged.iteration_time([], [10, 33, 47]) == pytest.approx(expected, rel=1e-5)
    assert contiguous.iteration_time([], [10, 33, 47]) < paged.iteration_time([], [10, 33, 47])
    with pytest.raises(ValueError, match="fitted for model 'tiny', not 'opt-13b'"):
        build_cost_model(load_model("opt-13b"), hw)


def test_the_fit_and_the_model_name_the_same_terms():
    assert set(FEATURES) == set(TERMS) | set(OPTIONAL_TERMS)


def fitted_hw(**fitted) -> HardwareSpec:
    base = load_hardware("cpu")
    return dataclasses.replace(base, name="cpu-test", fitted={"model": "tiny", **fitted})


def test_the_prefill_term_is_charged_once_per_iteration_that_holds_a_prefill():
    cm = LinearCostModel(load_model("tiny"), fitted_hw(**TRUE))
    one = TRUE["overhead_s"] + TRUE["prefill_iteration_s"] + TRUE["per_row_s"] + 16 * TRUE["per_token_s"] \
        + TRUE["prefill_pair_s"] * 16 * 17
    assert cm.iteration_time([16], []) == pytest.approx(one, rel=1e-12)
    assert cm.breakdown([16, 16], [])["prefill_iteration"] == TRUE["prefill_iteration_s"]   # once, not per prompt
    assert cm.breakdown([16], [40, 50])["prefill_iteration"] == TRUE["prefill_iteration_s"]  # a mixed batch too
    assert cm.breakdown([], [40, 50])["prefill_iteration"] == 0.0
    assert sum(cm.breakdown([16], [40]).values()) == pytest.approx(cm.iteration_time([16], [40]), rel=1e-12)


def test_a_preset_fitted_before_the_prefill_term_loads_with_it_at_zero():
    older = {k: v for k, v in TRUE.items() if k != "prefill_iteration_s"}
    old, new = (LinearCostModel(load_model("tiny"), fitted_hw(**f)) for f in (older, TRUE))
    assert old.c["prefill_iteration_s"] == 0.0
    assert new.iteration_time([16], []) - old.iteration_time([16], []) == pytest.approx(TRUE["prefill_iteration_s"])
    assert new.iteration_time([], [40]) == old.iteration_time([], [40])
    with pytest.raises(ValueError, match="prefill_iteration_s"):
        LinearCostModel(load_model("tiny"), fitted_hw(**{**TRUE, "prefill_iteration_s": -1e-3}))
    with pytest.raises(ValueError, match="lacks \\['overhead_s'\\]"):
        LinearCostModel(load_model("tiny"), fitted_hw(**{k: v for k, v in TRUE.items() if k != "overhead_s"}))


def test_the_committed_cpu_preset_predicts_the_short_prefill_it_was_fitted_on():
    """The 16-token single prefill (9.5 ms measured) was predicted at 4.9 ms before the prefill term."""
    df = pd.read_parquet(PROFILES / "cpu_tiny.parquet")
    row = df[(df["kind"] == "prefill") & (df["rows"] == 1) & (df["tokens"] == 16)].iloc[0]
    predicted = build_cost_model(load_model("tiny"), load_hardware("cpu-tiny")).iteration_time([16], [])
    assert predicted == pytest.approx(row["time_s"], rel=0.15)


def test_datasheet_presets_charge_the_papers_paged_kernel_penalty():
    model, hw = load_model("opt-13b"), load_hardware("a100-40gb")
    contiguous, paged16 = CostModel(model, hw), CostModel(model, hw, 16)
    batch = [64 * 4] * 32                                   # whole blocks: 32 rows of 256 tokens
    extra = paged16.breakdown([], batch)["attention_decode"] / contiguous.breakdown([], batch)["attention_decode"]
    assert extra == pytest.approx(1 + 3.68 / 16, rel=0.02)  # Figure 18a: 20-26% slower at block size 16
    times = [CostModel(model, hw, bs).iteration_time([], batch) for bs in (1, 4, 16, 64, 256)]
    assert times == sorted(times, reverse=True)             # smaller blocks cost more
    assert times[-1] == pytest.approx(contiguous.iteration_time([], batch), rel=0.01)
    assert blocks_read([1, 16, 17, 33], 16) == 1 + 1 + 2 + 3
    no_penalty = dataclasses.replace(hw, paged_block_cost_tokens=0.0)
    assert CostModel(model, no_penalty, 16).iteration_time([], batch) == contiguous.iteration_time([], batch)
