import pytest

from pagedbench.workloads import WorkloadConfig, build_workload


def key(trace):
    return [(r.id, r.arrival_s, r.prompt_token_ids, r.output_len) for r in trace]


@pytest.fixture
def sharegpt_path(write_sharegpt):
    return str(write_sharegpt([(4 + (7 * i) % 90, 4 + (13 * i) % 70) for i in range(60)]))


CONFIGS = {
    "sharegpt": lambda path: dict(name="sharegpt", path=path, num_requests=40),
    "alpaca": lambda path: dict(name="alpaca", num_requests=200),
    "synthetic": lambda path: dict(name="synthetic", num_requests=200),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_same_config_same_trace(name, sharegpt_path):
    kwargs = CONFIGS[name](sharegpt_path) | dict(arrival="poisson", request_rate=3.0)
    assert key(build_workload(WorkloadConfig(**kwargs))) == key(build_workload(WorkloadConfig(**kwargs)))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_different_seeds_differ(name, sharegpt_path):
    a = build_workload(WorkloadConfig(**CONFIGS[name](sharegpt_path), seed=0))
    b = build_workload(WorkloadConfig(**CONFIGS[name](sharegpt_path), seed=1))
    assert [r.prompt_token_ids for r in a] != [r.prompt_token_ids for r in b]


def test_arrivals_do_not_change_the_requests(sharegpt_path):
    offline = build_workload(WorkloadConfig(name="sharegpt", path=sharegpt_path, num_requests=40))
    gamma = build_workload(WorkloadConfig(name="sharegpt", path=sharegpt_path, num_requests=40,
                                          arrival="gamma", request_rate=2.0, burstiness=0.5))
    assert [r.prompt_token_ids for r in offline] == [r.prompt_token_ids for r in gamma]
    assert all(r.arrival_s == 0.0 for r in offline)
    assert gamma[-1].arrival_s > 0


def test_ids_follow_arrival_order(sharegpt_path):
    trace = build_workload(WorkloadConfig(name="sharegpt", path=sharegpt_path, num_requests=40,
                                          arrival="poisson", request_rate=5.0))
    assert [r.id for r in trace] == list(range(40))
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(trace, trace[1:]))
    assert trace[0].arrival_s == 0.0


def test_sample_is_a_prefix_of_the_shuffle(sharegpt_path):
    small = build_workload(WorkloadConfig(name="sharegpt", path=sharegpt_path, num_requests=10))
    large = build_workload(WorkloadConfig(name="sharegpt", path=sharegpt_path, num_requests=40))
    assert [r.prompt_token_ids for r in small] == [r.prompt_token_ids for r in large[:10]]


def test_more_requests_than_pairs_draw_a_fresh_permutation(sharegpt_path, caplog):
    caplog.set_level("INFO", logger="workloads")
    trace = build_workload(WorkloadConfig(name="sharegpt", path=sharegpt_path, num_requests=61))
    assert len({r.pair_index for r in trace[:60]}) == 60 and trace[60].pair_index in {r.pair_index for r in trace}
    assert "61 requests drawn from a pool of 60 pairs (2 permutations)" in caplog.text
