"""Sustainable request rates from latency curves, their bounds, and paged's ratios over the baselines."""
import json
import math

import pandas as pd
import pytest

from pagedbench.results.sweeps.sustainable import crossing, main, ratio_bound, ratios, sustainable_rates


def curve_rows(engine, points, workload="sharegpt", block_size=None):
    """Aggregate rows of one engine: points = [(rate, mean normalized latency), ...]."""
    return [{"workload": workload, "model": "opt-13b", "engine": engine, "block_size": block_size,
             "request_rate": rate, "norm_latency_s_mean": latency} for rate, latency in points]


@pytest.mark.parametrize("rates, latencies, threshold, expected", [
    # between 2 (0.5) and 3 (1.5): 2 + (1.0 - 0.5) / (1.5 - 0.5) x 1
    ([1, 2, 3, 4], [0.1, 0.5, 1.5, 3.0], 1.0, (2.5, "=")),
    # between 4 (0.2) and 8 (1.2): 4 + (1.0 - 0.2) / (1.2 - 0.2) x 4
    ([2, 4, 8], [0.1, 0.2, 1.2], 1.0, (7.2, "=")),
    # a latency equal to the threshold is sustained
    ([1, 2, 4], [0.2, 1.0, 2.0], 1.0, (2.0, "=")),
    # the first crossing counts, not a later dip back under
    ([1, 2, 3], [0.5, 1.5, 0.8], 1.0, (1.5, "=")),
    # the caller's threshold: between 1 (0.1) and 2 (0.5) at 0.3
    ([1, 2, 3, 4], [0.1, 0.5, 1.5, 3.0], 0.3, (1.5, "=")),
    ([1, 2, 3], [0.1, 0.2, 0.3], 1.0, (3, ">=")),     # never over: a lower bound at the highest rate
    ([1, 2, 3], [1.1, 2.0, 5.0], 1.0, (1, "<")),      # over from the start: below the lowest rate
    ([1, 2, 3], [0.5, math.nan, 0.2], 1.0, (1, ">=")),   # nothing finished at 2: over, no line to follow
])
def test_crossing(rates, latencies, threshold, expected):
    rate, bound = crossing(rates, latencies, threshold)
    assert rate == pytest.approx(expected[0]) and bound == expected[1]


def test_sustainable_rates_per_engine_and_block_size():
    rows = (curve_rows("orca-max", [(4, 1.8), (1, 0.2), (2, 0.6), (2, 1.0)])       # unsorted, rate 2 twice
            + curve_rows("paged", [(1, 0.1), (2, 0.2), (4, 0.3)], block_size=16)
            + curve_rows("paged", [(1, 0.1), (2, 0.4), (4, 1.4)], block_size=256)
            + curve_rows("paged", [(math.nan, 9.0)], block_size=16))                 # offline: no curve
    rates = sustainable_rates(pd.DataFrame(rows), threshold=1.0)
    got = {(r.engine, None if pd.isna(r.block_size) else int(r.block_size)): (r.sustainable_rate, r.bound)
           for r in rates.itertuples()}
    assert got[("orca-max", None)] == (pytest.approx(2 + (1.0 - 0.8) / (1.8 - 0.8) * 2), "=")   # rate 2: mean 0.8
    assert got[("paged", 16)] == (4, ">=")
    assert got[("paged", 256)] == (pytest.approx(2 + 0.6 / 1.0 * 2), "=")
    assert list(rates["engine"]) == ["orca-max", "paged", "paged"]
    assert set(rates["num_rates"]) == {3} and set(rates["threshold"]) == {1.0}


def test_threshold_is_the_callers():
    df = pd.DataFrame(curve_rows("orca-max", [(1, 0.2), (2, 0.8), (4, 1.8)]))
    assert sustainable_rates(df, threshold=0.5)["sustainable_rate"].iloc[0] == pytest.approx(1.5)
    assert sustainable_rates(df, threshold=2.0)["bound"].iloc[0] == ">="
    with pytest.raises(ValueError, match="threshold"):
        sustainable_rates(df, threshold=0)


def test_offline_only_gives_no_rates():
    df = pd.DataFrame(curve_rows("paged", [(math.nan, 0.2)], block_size=16))
    assert sustainable_rates(df).empty


@pytest.mark.parametrize("numerator, denominator, expected", [
    ("=", "=", "="), (">=", "=", ">="), ("=", "<", ">="), (">=", "<", ">="),
    ("<", "=", "<="), ("=", ">=", "<="), ("<", ">=", "<="), (">=", ">=", "?"), ("<", "<", "?"),
])
def test_ratio_bound(numerator, denominator, expected):
    assert ratio_bound(numerator, denominator) == expected


def test_ratios_per_group_in_the_papers_order():
    rows = (curve_rows("static", [(1, 1.5), (2, 3.0)])                     # "<" 1
            + curve_rows("orca-max", [(1, 0.5), (2, 1.5)])                # "=" 1.5
            + curve_rows("orca-oracle", [(1, 0.2), (2, 0.6), (4, 1.4)])   # "=" 3.0
            + curve_rows("paged", [(1, 0.1), (2, 0.2), (4, 0.4), (6, 0.9)], block_size=16)    # ">=" 6
            + curve_rows("paged", [(1, 0.1), (2, 0.2), (4, 0.6), (6, 1.4)], block_size=64)    # "=" 5.0
            + curve_rows("orca-oracle", [(10, 0.2), (20, 1.2)], workload="alpaca")          # "=" 18
            + curve_rows("paged", [(10, 0.1), (20, 0.4), (40, 1.6)], workload="alpaca", block_size=16))   # "=" 30
    table = ratios(sustainable_rates(pd.DataFrame(rows)))
    share = table[(table["workload"] == "sharegpt") & (table["block_size"] == 16)]
    assert list(share["name"]) == ["paged/orca-oracle", "paged/orca-max", "paged/static"]   # no pow2 measured
    assert dict(zip(share["baseline"], share["ratio"])) == pytest.approx(
        {"orca-oracle": 2.0, "orca-max": 4.0, "static": 6.0})
    assert dict(zip(share["baseline"], share["bound"])) == {"orca-oracle": ">=", "orca-max": ">=", "static": ">="}
    b64 = table[(table["workload"] == "sharegpt") & (table["block_size"] == 64)].set_index("baseline")
    assert b64.loc["orca-oracle", "ratio"] == pytest.approx(5.0 / 3.0) and b64.loc["orca-oracle", "bound"] == "="
    assert b64.loc["static", "bound"] == ">="
    alpaca = table[table["workload"] == "alpaca"]
    assert list(alpaca["name"]) == ["paged/orca-oracle"]
    assert alpaca["ratio"].iloc[0] == pytest.approx(30 / 18) and alpaca["bound"].iloc[0] == "="


def test_command_takes_the_threshold(tmp_path, capsys):
    for i, row in enumerate(curve_rows("orca-max", [(1, 0.2), (2, 0.8), (4, 1.8)])
                            + curve_rows("paged", [(1, 0.1), (2, 0.2), (4, 0.3)], block_size=16)):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "summary.json").write_text(json.dumps(row))
    assert main([str(tmp_path), "--threshold", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "<= 0.5 s/token" in out and "1.5" in out and ">=4" in out and ">=2.67x" in out
    assert main([str(tmp_path), "--threshold", "-1"]) == 2
    assert main([str(tmp_path / "nowhere")]) == 2
