"""The summary's admission_blocked_by_* fractions: over steady iterations with a waiting request, by duration."""
import math

import pytest

from pagedbench.engines.batch import ADMISSION_LIMITS
from pagedbench.results.record.frames import iterations_frame, requests_frame
from pagedbench.results.record.summary import summarize
from tests.engines.conftest import make_request
from tests.engines.test_schedulers import random_trace, serve
from tests.results.test_summary import iterations_table, requests_table

KEYS = [f"admission_blocked_by_{limit}" for limit in ADMISSION_LIMITS]


def test_fractions_weight_the_window_iterations_with_a_waiting_request_by_duration():
    # Window [10, 100]: the warm-up iteration and the drain are out; of the three inside, the one with
    # nothing waiting is out too; of the 30 + 60 s left, memory blocked 30 and the row cap 60.
    its = iterations_table([(0.0, 10.0, 2, 2, 20), (10.0, 30.0, 2, 2, 20), (40.0, 60.0, 2, 2, 20),
                            (70.0, 5.0, 2, 2, 20), (100.0, 500.0, 1, 1, 5)])
    its["num_waiting"] = [3, 2, 1, 0, 4]
    its["admission_blocked_by"] = ["token_budget", "memory", "max_num_seqs", "", "memory"]
    reqs = requests_table([(0.0, 0.0, 1.0, 5.0, 5, 5, "finished"), (100.0, 100.0, 101.0, 600.0, 5, 5, "finished")])
    s = summarize(its, reqs, warmup_fraction=0.1)
    assert s["admission_blocked_by_memory"] == pytest.approx(30 / 90)
    assert s["admission_blocked_by_max_num_seqs"] == pytest.approx(60 / 90)
    assert s["admission_blocked_by_token_budget"] == 0.0


def test_reasons_that_are_no_limit_count_in_none():
    its = iterations_table([(10.0, 30.0, 2, 2, 20), (40.0, 60.0, 2, 2, 20)])
    its["num_waiting"] = [1, 1]
    its["admission_blocked_by"] = ["batch_running", "memory"]
    reqs = requests_table([(0.0, 0.0, 1.0, 5.0, 5, 5, "finished"), (100.0, 100.0, 101.0, 600.0, 5, 5, "finished")])
    s = summarize(its, reqs, warmup_fraction=0.0)
    assert s["admission_blocked_by_memory"] == pytest.approx(60 / 90)
    assert s["admission_blocked_by_max_num_seqs"] == 0.0 and s["admission_blocked_by_token_budget"] == 0.0


def test_nan_without_a_waiting_request_or_without_the_column():
    its = iterations_table([(10.0, 30.0, 2, 2, 20)])
    its["admission_blocked_by"] = [""]
    reqs = requests_table([(0.0, 0.0, 1.0, 5.0, 5, 5, "finished"), (100.0, 100.0, 101.0, 600.0, 5, 5, "finished")])
    assert all(math.isnan(summarize(its, reqs)[k]) for k in KEYS)   # num_waiting is 0 throughout
    its["num_waiting"] = 1
    assert all(math.isnan(summarize(its.drop(columns="admission_blocked_by"), reqs)[k]) for k in KEYS)


@pytest.mark.parametrize("engine", [dict(name="static"), dict(name="orca", reservation="oracle"),
                                    dict(name="paged", block_size=4, watermark=0.0)],
                         ids=["static", "orca", "paged"])
def test_a_run_summary_has_the_keys_and_keeps_every_other_value(engine):
    record = serve(engine, random_trace(40, seed=3, rate=2.0), capacity=160, max_num_seqs=6)
    its, reqs = iterations_frame(record), requests_frame(record)
    with_column = summarize(its, reqs)
    without = summarize(its.drop(columns="admission_blocked_by"), reqs)
    assert set(KEYS) <= with_column.keys() and list(with_column) == list(without)
    for k in KEYS:
        assert 0 <= with_column[k] <= 1 and math.isnan(without[k])
    assert sum(with_column[k] for k in KEYS) > 0
    for k in (k for k in with_column if k not in KEYS):
        a, b = with_column[k], without[k]
        assert a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)), k
