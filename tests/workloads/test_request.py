"""Request: sampling width and shared-prefix tags, checked when made."""
import pytest

from pagedbench.workloads import Request, WorkloadConfig, build_workload


def make(**kwargs) -> Request:
    return Request(**{"id": 7, "arrival_s": 0.0, "prompt_token_ids": (1, 2, 3, 4), "output_len": 5, **kwargs})


def test_defaults_are_one_sequence_without_a_prefix():
    r = make()
    assert (r.n, r.beam_width, r.width, r.prefix_id, r.prefix_len) == (1, 1, 1, None, 0)


@pytest.mark.parametrize("kwargs, width", [({"n": 4}, 4), ({"beam_width": 6}, 6), ({"n": 1, "beam_width": 1}, 1)])
def test_width_is_the_sequences_a_request_runs(kwargs, width):
    assert make(**kwargs).width == width


def test_a_shared_prefix_is_part_of_the_prompt():
    r = make(prefix_id=0, prefix_len=3)
    assert r.prompt_len == 4 and r.prompt_token_ids[:r.prefix_len] == (1, 2, 3)


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, "n and beam_width must be >= 1"),
    ({"beam_width": 0}, "n and beam_width must be >= 1"),
    ({"n": 2, "beam_width": 2}, r"request 7: a request is either parallel sampling \(n > 1\) or beam search"),
    ({"prefix_id": 0, "prefix_len": -1}, "prefix_len must be >= 0 and shorter than the prompt"),
    ({"prefix_id": 0, "prefix_len": 4}, r"shorter than the prompt \(4 tokens\), got 4"),
    ({"prefix_id": 0, "prefix_len": 0}, "needs both a prefix_id and a prefix_len > 0"),
    ({"prefix_len": 2}, "needs both a prefix_id and a prefix_len > 0"),
    ({"prefix_id": -1, "prefix_len": 2}, "prefix_id must be None or >= 0"),
])
def test_invalid_requests_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


@pytest.mark.parametrize("name", ["sharegpt", "chat", "alpaca", "synthetic", "translation"])
@pytest.mark.parametrize("sampling", [{"n": 4}, {"beam_width": 6}, {}])
def test_every_workload_tags_its_requests_with_the_configs_sampling(name, sampling, data_dir):
    path = {"sharegpt": str(data_dir / "sharegpt_small.json"), "chat": str(data_dir / "sharegpt_small.json")}
    trace = build_workload(WorkloadConfig(name=name, path=path.get(name), num_requests=12, min_len=1, **sampling))
    assert len(trace) == 12
    expected = (sampling.get("n", 1), sampling.get("beam_width", 1))
    assert {(r.n, r.beam_width) for r in trace} == {expected}
    assert {r.width for r in trace} == {max(expected)}
