"""How fast a capacity search runs, cold and warm: paged and Orca (Max) on ShareGPT, seeds 0-2, five-minute
traces, both criteria, to 2%, as a whole `python run.py -m hydra/sweeper=capacity` process (its runs one after
another in that process: hydra/launcher=basic), into a fresh sweep folder each round.

    make bench PYTEST_ARGS="-k search_speed -s"

`warm`: seeds 1 and 2 start from seed 0's capacity (`hydra.sweeper.warm_start`, the default); `cold`: every
search starts at 1 req/s. Both must find the same capacities on this grid (its curves are monotone where
probed); extra_info holds the runs each made. The figure of merit is the ratio of the two medians. Untimed
(`make test`), each search runs once, on paged alone, on one-minute traces.
"""
import subprocess
import sys

import pandas as pd
import pytest

from pagedbench.paths import ROOT

ROUNDS = 2
GRID = ["hydra/sweeper=capacity", "hydra/launcher=basic", "backend=sim", "engine=paged,orca_max", "workload=sharegpt",
        "workload.arrival=poisson", "workload.duration_s=300", "workload.seed=0,1,2", "progress=false"]
START = {"warm": [], "cold": ["hydra.sweeper.warm_start=null"]}
# Untimed, each search once: paged alone, on one-minute traces (the same seeds and precision; warm and cold end
# on the same brackets there too).
UNTIMED = {"engine": "engine=paged", "workload.duration_s": "workload.duration_s=60"}
found: dict[str, pd.DataFrame] = {}


@pytest.mark.parametrize("start", list(START))
def test_search_speed_fig12_grid_on_five_minute_traces(benchmark, start, tmp_path):
    benchmark.group = "capacity search: paged and orca-max x ShareGPT x 3 seeds, 5-minute traces, 2%"
    folders = iter(range(1000))

    def search():
        sweep = tmp_path / f"sweep{next(folders)}"
        grid = GRID if benchmark.enabled else [UNTIMED.get(a.split("=")[0], a) for a in GRID]
        done = subprocess.run([sys.executable, "run.py", "-m", *grid, *START[start], f"hydra.sweep.dir={sweep}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        return sweep

    sweep = benchmark.pedantic(search, rounds=ROUNDS if benchmark.enabled else 1, iterations=1)
    table = pd.read_csv(sweep / "capacity.csv")
    assert table["done"].all() and (table["bound"] == "=").all() and len(table) == table["engine"].nunique() * 3 * 2
    benchmark.extra_info["runs"] = len(list(sweep.rglob("summary.json")))
    found[start] = table[["engine", "seed", "criterion", "capacity", "upper"]]
    if len(found) == len(START):
        pd.testing.assert_frame_equal(found["warm"], found["cold"])
