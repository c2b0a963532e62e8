import numpy as np
import pytest

from pagedbench.workloads import WorkloadConfig, build_workload
from pagedbench.workloads.filters import passes_filters


@pytest.mark.parametrize(
    "prompt_len, output_len, kept",
    [
        (3, 100, False),  # prompt under min_len
        (4, 100, True),
        (100, 3, False),  # completion under min_len
        (100, 4, True),
        (1024, 100, True),
        (1025, 100, False),  # prompt over max_prompt_len
        (1024, 1024, True),  # total exactly 2048
        (1024, 1025, False),  # total 2049
        (1000, 1048, True),
        (1000, 1049, False),
        (4, 2044, True),
        (4, 2045, False),  # a short prompt with a completion that overflows the total
    ],
)
def test_each_rule_and_its_boundary(prompt_len, output_len, kept):
    mask = passes_filters(np.array([prompt_len]), np.array([output_len]), 4, 1024, 2048)
    assert bool(mask[0]) is kept


def test_filters_follow_the_config(write_sharegpt):
    lengths = [(3, 10), (4, 10), (10, 3), (10, 4), (1024, 10), (1025, 10),
               (1024, 1024), (1024, 1025), (1000, 1048), (1000, 1049)]
    path = write_sharegpt(lengths)
    kept = {(4, 10), (10, 4), (1024, 10), (1024, 1024), (1000, 1048)}
    trace = build_workload(WorkloadConfig(name="sharegpt", path=str(path), num_requests=len(kept)))
    assert {(r.prompt_len, r.output_len) for r in trace} == kept
    more = build_workload(WorkloadConfig(name="sharegpt", path=str(path), num_requests=3 * len(kept)))
    assert {(r.prompt_len, r.output_len) for r in more} == kept   # drawn again from the same 5


def test_looser_limits_keep_more(write_sharegpt):
    path = write_sharegpt([(2, 10), (10, 2), (1500, 10)])
    cfg = WorkloadConfig(name="sharegpt", path=str(path), num_requests=3, min_len=2,
                         max_prompt_len=1500, max_total_len=1510)
    assert sorted(r.prompt_len for r in build_workload(cfg)) == [2, 10, 1500]


def test_synthetic_traces_are_not_filtered():
    cfg = WorkloadConfig.from_dict({
        "name": "synthetic", "num_requests": 5,
        "prompt_dist": {"kind": "fixed", "value": 1}, "output_dist": {"kind": "fixed", "value": 3000},
    })
    trace = build_workload(cfg)
    assert [(r.prompt_len, r.output_len) for r in trace] == [(1, 3000)] * 5


def test_max_output_len_cuts_outputs_before_the_filters(write_sharegpt):
    path = str(write_sharegpt([(10, 5), (10, 50), (10, 2100)]))
    uncapped = build_workload(WorkloadConfig(name="sharegpt", path=path, num_requests=3))
    assert {r.output_len for r in uncapped} == {5, 50}   # 10 + 2100 > 2048: dropped
    capped = build_workload(WorkloadConfig(name="sharegpt", path=path, num_requests=3, max_output_len=20))
    assert sorted(r.output_len for r in capped) == [5, 20, 20]   # a cut, so the long pair now passes
