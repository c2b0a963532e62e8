"""A trace's size is known from its config: past max_trace_requests it is refused before anything is built."""
import json

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
import pytest

from pagedbench.paths import CONF
from pagedbench.workloads import WorkloadConfig, build_workload, trace_size
from pagedbench.workloads.trace_size import DEFAULT_MAX_TRACE_REQUESTS, expected_size


def test_a_billion_seconds_is_refused_in_one_line_naming_the_estimate_and_the_option():
    with pytest.raises(ValueError) as err:
        WorkloadConfig(name="sharegpt", arrival="poisson", request_rate=5, duration_s=1e9)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("sharegpt: about 5,000,000,000 requests (request_rate 5 req/s x duration_s 1e+09 s), ~")
    assert "GB" in message or "TB" in message
    assert "past max_trace_requests=4,000,000" in message and "raise workload.max_trace_requests" in message


def test_five_million_requests_need_the_limit_raised():
    with pytest.raises(ValueError, match=r"about 5,000,000 requests .* ~2\.0 GB is past max_trace_requests"):
        WorkloadConfig(name="sharegpt", arrival="poisson", request_rate=5, duration_s=1e6)
    with pytest.raises(ValueError, match="about 5,000,000 requests \\(num_requests\\)"):
        WorkloadConfig(name="alpaca", num_requests=5_000_000)
    cfg = WorkloadConfig(name="sharegpt", arrival="poisson", request_rate=5, duration_s=1e6, max_trace_requests=6e6)
    assert cfg.max_trace_requests == 6_000_000   # 6e6 from a command line is a count
    with pytest.raises(ValueError, match="max_trace_requests must be >= 1"):
        WorkloadConfig(name="sharegpt", max_trace_requests=0)


def test_the_estimate_counts_prompts_only_where_each_request_has_its_own():
    pooled = expected_size(WorkloadConfig(name="alpaca", num_requests=1000))
    synthetic = expected_size(WorkloadConfig(name="synthetic", num_requests=1000))   # every prompt 512 tokens
    assert (pooled.requests, pooled.bytes) == (1000, 1000 * trace_size.BYTES_PER_REQUEST)
    assert synthetic.bytes == 1000 * (trace_size.BYTES_PER_REQUEST + 512 * trace_size.BYTES_PER_PROMPT_TOKEN)
    assert expected_size(WorkloadConfig(name="trace", path="t.jsonl", arrival="trace")) is None   # the file says


def test_the_estimate_is_the_right_order_of_magnitude():
    """The per-request constants are measured: a built trace takes between half and twice the estimate."""
    import tracemalloc

    cfg = WorkloadConfig(name="synthetic", num_requests=2000, prompt_dist={"kind": "fixed", "value": 100})
    tracemalloc.start()
    try:
        trace = build_workload(cfg)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(trace) == 2000
    assert 0.5 < held / expected_size(cfg).bytes < 2.0


def test_no_config_in_conf_is_refused_even_at_the_capacity_searchs_highest_rate():
    max_rate = OmegaConf.load(CONF / "hydra" / "sweeper" / "capacity.yaml").max_rate
    experiments = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
    for experiment in experiments:
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            cfg = compose(config_name="config", overrides=[f"experiment={experiment}"])
        workload = OmegaConf.to_container(cfg.workload, resolve=True)
        if workload.get("duration_s") is not None:
            workload["request_rate"] = max(workload["request_rate"], max_rate)
        assert WorkloadConfig.from_dict(workload).max_trace_requests == DEFAULT_MAX_TRACE_REQUESTS
    for path in (CONF / "workload").glob("*.yaml"):
        assert OmegaConf.load(path).max_trace_requests == DEFAULT_MAX_TRACE_REQUESTS, path.name


def test_a_replayed_file_longer_than_the_limit_is_refused(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"prompt_len": 3, "output_len": 2, "arrival_s": 0.0}) + "\n"
                            for _ in range(5)))
    with pytest.raises(ValueError, match=r"trace: about 5 requests \(the rows of .*t.jsonl\), ~.* is past "
                                         "max_trace_requests=4"):
        build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace", max_trace_requests=4))
    assert len(build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace", max_trace_requests=5))) == 5


class FakeBar:
    """Records how tqdm was asked to show a bar."""
    calls = []

    def __init__(self, items, **kwargs):
        self.items = items
        FakeBar.calls.append(kwargs)

    def __iter__(self):
        return iter(self.items)


@pytest.mark.parametrize("num_requests, large", [(20, False), (50, True)])
def test_a_large_trace_is_announced_and_built_behind_a_bar_shown_only_on_a_terminal(monkeypatch, caplog,
                                                                                    num_requests, large):
    monkeypatch.setattr(trace_size, "tqdm", FakeBar)
    monkeypatch.setattr(trace_size, "PROGRESS_MIN_REQUESTS", 50)
    FakeBar.calls = []
    caplog.set_level("INFO", logger="workloads")
    trace = build_workload(WorkloadConfig(name="alpaca", num_requests=num_requests))
    assert len(trace) == num_requests and [r.id for r in trace] == list(range(num_requests))
    # disable=None: tqdm shows the bar only when stderr is a terminal; True: never (a small trace).
    assert [(c["total"], c["disable"]) for c in FakeBar.calls] == [(num_requests, None if large else True)]
    announced = [r.getMessage() for r in caplog.records if "building about" in r.getMessage()]
    assert announced == ([f"alpaca_synthetic: building about {num_requests:,} requests (num_requests), ~20.0 kB"]
                         if large else [])
