"""The generated WMT16 en-de-like translation workload: few-shot prefixes, lengths, seeding."""
import numpy as np
import pytest

from pagedbench.workloads import WorkloadConfig, build_workload
from pagedbench.workloads.synthetic import VOCAB_SIZE
from pagedbench.workloads.translation import (FRAMING_TOKENS, RATIO_MEAN, SOURCE_MEAN, SOURCE_SD, prefix_len_for_shots,
                                   translation_pairs)


def trace(**kwargs):
    return build_workload(WorkloadConfig(name="translation", **kwargs))


@pytest.mark.parametrize("shots, length", [(0, 0), (1, 80), (2, 145), (3, 211), (4, 276), (5, 341), (7, 472)])
def test_prefix_length_per_shot_count(shots, length):
    assert prefix_len_for_shots(shots) == length


@pytest.mark.parametrize("shots, length", [(1, 80), (5, 341)])
def test_the_papers_prefix_lengths_reach_every_request(shots, length):
    requests = trace(num_shots=shots, num_requests=200)
    assert len(requests) == 200
    assert {(r.prefix_id, r.prefix_len) for r in requests} == {(0, length)}
    assert all(r.prompt_len >= length + FRAMING_TOKENS + 4 for r in requests)
    prefixes = {r.prompt_token_ids[:length] for r in requests}
    assert len(prefixes) == 1   # one prefix, token for token
    assert len({r.prompt_token_ids[length:] for r in requests}) > 150   # each request's own part differs


def test_no_shots_no_prefix():
    requests = trace(num_shots=0, num_requests=50)
    assert all(r.prefix_id is None and r.prefix_len == 0 for r in requests)


def test_several_prefixes_are_picked_uniformly_and_differ():
    requests = trace(num_shots=5, num_prefixes=4, num_requests=4000)
    ids = np.array([r.prefix_id for r in requests])
    assert set(ids.tolist()) == {0, 1, 2, 3}
    assert np.bincount(ids) == pytest.approx([1000] * 4, rel=0.1)
    by_id = {}
    for r in requests:
        by_id.setdefault(r.prefix_id, set()).add(r.prompt_token_ids[:r.prefix_len])
    assert all(len(p) == 1 for p in by_id.values())      # same prefix_id, same prefix tokens
    assert len({next(iter(p)) for p in by_id.values()}) == 4   # different ids, different prefixes


def test_a_fewer_shot_prefix_starts_like_a_longer_one():
    one, five = trace(num_shots=1, num_requests=5), trace(num_shots=5, num_requests=5)
    assert one[0].prompt_token_ids[:80] == five[0].prompt_token_ids[:80]


def test_seeded_and_reproducible():
    a, b = trace(num_shots=5, num_prefixes=2, seed=3), trace(num_shots=5, num_prefixes=2, seed=3)
    assert a == b
    c = trace(num_shots=5, num_prefixes=2, seed=4)
    assert [r.prompt_token_ids for r in c] != [r.prompt_token_ids for r in a]
    assert c[0].prompt_token_ids[:341] != a[0].prompt_token_ids[:341]   # the prefix depends on the seed too


def test_lengths_follow_the_stated_statistics():
    pairs = translation_pairs(40_000, 5, 1, 0, np.random.default_rng(0))
    source = pairs.prompt_lens - 341 - FRAMING_TOKENS
    target = pairs.output_lens
    assert source.min() >= 4 and source.max() <= 256 and target.min() >= 4
    assert source.mean() == pytest.approx(SOURCE_MEAN, rel=0.03)
    assert source.std() == pytest.approx(SOURCE_SD, rel=0.1)
    assert (target / source).mean() == pytest.approx(RATIO_MEAN, rel=0.03)
    assert target.mean() == pytest.approx(SOURCE_MEAN * RATIO_MEAN, rel=0.04)
    assert pairs.prompt_ids.min() >= 0 and pairs.prompt_ids.max() < VOCAB_SIZE


def test_length_filters_still_apply():
    requests = trace(num_shots=5, num_requests=300, max_prompt_len=360, max_total_len=400)
    assert all(r.prompt_len <= 360 and r.total_len <= 400 for r in requests)
    assert len({r.pair_index for r in requests}) < 300   # the kept pool is smaller, so pairs repeat


def test_a_prefix_too_long_for_the_prompt_limit_is_a_clear_error():
    with pytest.raises(ValueError, match="20-shot prefix is 1320 tokens.*max_prompt_len=1024"):
        trace(num_shots=20)


def test_sampling_reaches_every_request():
    requests = trace(num_shots=1, beam_width=4, num_requests=30)
    assert all(r.beam_width == 4 and r.n == 1 and r.width == 4 for r in requests)
