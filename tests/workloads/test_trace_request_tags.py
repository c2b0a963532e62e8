"""Trace files carry n, beam_width, prefix_id and prefix_len; absent columns mean the defaults."""
import json

import pytest

from pagedbench.workloads import Request, WorkloadConfig, build_workload
from pagedbench.workloads.trace_file import read_trace, trace_frame, write_trace

TAGS = ("n", "beam_width", "prefix_id", "prefix_len")


def tags(trace):
    return [(r.n, r.beam_width, r.prefix_id, r.prefix_len) for r in trace]


def translation(**kwargs):
    return build_workload(WorkloadConfig(name="translation", num_shots=1, num_prefixes=3, num_requests=40,
                                         arrival="poisson", request_rate=5.0, **kwargs))


def write_rows(tmp_path, rows):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
@pytest.mark.parametrize("with_tokens", [False, True])
def test_tags_survive_a_round_trip(tmp_path, suffix, with_tokens):
    original = translation(n=3)
    path = write_trace(original, tmp_path / f"t{suffix}", with_tokens=with_tokens)
    replayed = build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace"))
    assert tags(replayed) == tags(original)
    assert [(r.prompt_len, r.output_len) for r in replayed] == [(r.prompt_len, r.output_len) for r in original]
    if with_tokens:
        assert [r.prompt_token_ids for r in replayed] == [r.prompt_token_ids for r in original]
    prefixes = {}
    for r in replayed:   # with or without the file's ids, one prefix_id has one prefix
        prefixes.setdefault(r.prefix_id, set()).add(r.prompt_token_ids[:r.prefix_len])
    assert len(prefixes) == 3 and all(len(p) == 1 for p in prefixes.values())


def test_beam_width_and_missing_prefixes_round_trip(tmp_path):
    original = build_workload(WorkloadConfig(name="synthetic", num_requests=5, beam_width=4))
    path = write_trace(original, tmp_path / "t.parquet")
    assert set(read_trace(path).columns) == {"prompt_len", "output_len", "arrival_s", "n", "beam_width"}
    replayed = build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace"))
    assert tags(replayed) == [(1, 4, None, 0)] * 5


def test_a_plain_trace_writes_no_tag_columns():
    trace = build_workload(WorkloadConfig(name="synthetic", num_requests=3))
    assert list(trace_frame(trace).columns) == ["prompt_len", "output_len", "arrival_s"]


def test_absent_columns_take_the_configs_sampling(tmp_path):
    path = write_rows(tmp_path, [{"prompt_len": 5, "output_len": 6, "arrival_s": 0.0}] * 2)
    assert tags(build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace"))) == [(1, 1, None, 0)] * 2
    pooled = build_workload(WorkloadConfig(name="trace", path=str(path), arrival="offline", num_requests=4, n=2))
    assert tags(pooled) == [(2, 1, None, 0)] * 4


def test_a_drawn_pool_keeps_each_rows_prefix(tmp_path):
    path = write_trace(translation(), tmp_path / "t.jsonl")
    pooled = build_workload(WorkloadConfig(name="trace", path=str(path), arrival="poisson", request_rate=2.0,
                                           num_requests=100))
    rows = read_trace(path)
    assert all(r.prefix_id == rows["prefix_id"][r.pair_index] and r.prefix_len == 80 for r in pooled)


def test_the_file_and_the_config_do_not_both_set_sampling(tmp_path):
    path = write_rows(tmp_path, [{"prompt_len": 5, "output_len": 3, "arrival_s": 0.0, "n": 2}])
    with pytest.raises(ValueError, match="the file sets n on every row; leave workload.n at 1"):
        build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace", n=2))
    with pytest.raises(ValueError, match="either parallel sampling or beam search"):
        build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace", beam_width=2))


@pytest.mark.parametrize("row, message", [
    ({"n": 0}, "n must be a positive integer"),
    ({"beam_width": 1.5}, "beam_width must be a positive integer"),
    ({"n": 2, "beam_width": 2}, "line 1: a request is either parallel sampling"),
    ({"prefix_id": 0}, "prefix_id and prefix_len go together"),
    ({"prefix_len": 2}, "prefix_id and prefix_len go together"),
    ({"prefix_id": -1, "prefix_len": 2}, "prefix_id must be an integer >= 0, or null"),
    ({"prefix_id": "x", "prefix_len": 2}, "prefix_id must be an integer >= 0, or null"),
    ({"prefix_id": 0.5, "prefix_len": 2}, "prefix_id must be an integer >= 0, or null"),
    ({"prefix_id": 0, "prefix_len": -2}, "prefix_len must be an integer >= 0"),
    ({"prefix_id": 0, "prefix_len": 0}, "line 1: a row with a prefix_id needs a prefix_len > 0"),
    ({"prefix_id": None, "prefix_len": 3}, "line 1: a row with a prefix_id needs a prefix_len > 0"),
    ({"prefix_id": 0, "prefix_len": 5}, r"prefix_len 5 must be shorter than the prompt \(5 tokens\)"),
])
def test_bad_tag_columns_are_refused_with_the_reason(tmp_path, row, message):
    path = write_rows(tmp_path, [{"prompt_len": 5, "output_len": 3, **row}])
    with pytest.raises(ValueError, match=message):
        read_trace(path)


def test_rows_of_one_prefix_id_share_its_length_and_tokens(tmp_path):
    base = {"prompt_len": 4, "output_len": 2, "prefix_id": 1}
    path = write_rows(tmp_path, [{**base, "prefix_len": 2}, {**base, "prefix_len": 3}])
    with pytest.raises(ValueError, match="lines 1 and 2: share prefix_id 1 but not its prefix_len"):
        read_trace(path)
    path = write_rows(tmp_path, [{**base, "prefix_len": 2, "prompt_token_ids": [1, 2, 3, 4]},
                                 {**base, "prefix_len": 2, "prompt_token_ids": [1, 9, 3, 4]}])
    with pytest.raises(ValueError, match="lines 1 and 2: share prefix_id 1 but not its 2 prefix tokens"):
        read_trace(path)


def test_null_prefix_ids_mix_with_prefixed_rows(tmp_path):
    path = write_rows(tmp_path, [
        {"prompt_len": 6, "output_len": 2, "arrival_s": 0.0, "prefix_id": 0, "prefix_len": 3},
        {"prompt_len": 5, "output_len": 2, "arrival_s": 1.0, "prefix_id": None, "prefix_len": 0},
        {"prompt_len": 7, "output_len": 2, "arrival_s": 2.0, "prefix_id": 0, "prefix_len": 3}])
    trace = build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace"))
    assert tags(trace) == [(1, 1, 0, 3), (1, 1, None, 0), (1, 1, 0, 3)]
    assert trace[0].prompt_token_ids[:3] == trace[2].prompt_token_ids[:3]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_written_null_prefix_ids_read_back_as_none(tmp_path, suffix):
    original = [Request(0, 0.0, (1, 2, 3), 2, prefix_id=4, prefix_len=2), Request(1, 1.0, (5, 6, 7, 8), 2)]
    path = write_trace(original, tmp_path / f"t{suffix}", with_tokens=True)
    replayed = build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace", min_len=1))
    assert replayed == [Request(r.id, r.arrival_s, r.prompt_token_ids, r.output_len, prefix_id=r.prefix_id,
                                prefix_len=r.prefix_len, pair_index=r.id) for r in original]
