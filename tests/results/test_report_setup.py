"""How a section names the traces its runs were made on: read from the runs, right for any build."""
import math

import pandas as pd

from pagedbench.results.report.setup import duration_words, seed_words, trace_setup


def test_durations_read_as_adjectives():
    assert duration_words(3600) == "one-hour"
    assert duration_words(7200.0) == "2-hour"
    assert duration_words(600) == "10-minute"
    assert duration_words(20) == "20-second"
    assert duration_words(90) == "90-second"


def test_seeds_read_as_a_run_a_list_or_one():
    assert seed_words([0, 1, 2, 1]) == "seeds 0-2"
    assert seed_words([0, 2, 5]) == "seeds 0, 2, 5"
    assert seed_words([3.0]) == "seed 3"
    assert seed_words([math.nan]) == ""


def test_the_setup_of_fixed_duration_runs():
    runs = pd.DataFrame({"arrival": ["poisson"] * 4, "duration_s": [600.0] * 4, "num_requests": [10, 20, 30, 40],
                         "workload_seed": [0, 0, 1, 2]})
    setup = trace_setup(runs)
    assert setup["traces"] == "10-minute Poisson traces"
    assert setup["seeds"] == "seeds 0-2" and setup["num_seeds"] == 3
    assert setup["durations"] == [600.0] and setup["requests"] == []
    assert setup["words"] == "10-minute Poisson traces, seeds 0-2"


def test_the_setup_of_fixed_count_runs_and_of_mixed_durations():
    fixed = pd.DataFrame({"arrival": ["poisson"], "duration_s": [None], "num_requests": [1000], "workload_seed": [0]})
    assert trace_setup(fixed)["traces"] == "1,000-request Poisson traces"
    assert trace_setup(fixed)["requests"] == [1000]
    mixed = pd.DataFrame({"arrival": ["poisson", "poisson"], "duration_s": [20.0, 3600.0], "seed": [1, 1]})
    assert trace_setup(mixed)["traces"] == "20-second and one-hour Poisson traces"
    assert trace_setup(mixed)["seeds"] == "seed 1"


def test_no_runs_say_nothing():
    assert trace_setup(None) == {"traces": "", "seeds": "", "words": "", "num_seeds": 0, "durations": [], "requests": []}
    assert trace_setup(pd.DataFrame())["traces"] == ""
