import logging
import os

import numpy as np
import pytest

import pagedbench.workloads.alpaca
import pagedbench.workloads.cache
import pagedbench.workloads.pairs
import pagedbench.workloads.sharegpt
from pagedbench.workloads.alpaca import load_alpaca
from pagedbench.workloads.cache import cache_key
from pagedbench.workloads.pairs import TokenIds, TokenizedPairs, tokenize_pairs
from pagedbench.workloads.sharegpt import load_sharegpt
from pagedbench.workloads.tokenizer import load_tokenizer

from tests.workloads.word_tokenizer import WordTokenizer


@pytest.fixture
def count_tokenizing(monkeypatch):
    """Counts calls to tokenize_pairs made by the dataset loaders."""
    calls = []

    def counting(pairs, tokenizer):
        calls.append(tokenizer.name)
        return tokenize_pairs(pairs, tokenizer)

    monkeypatch.setattr(pagedbench.workloads.cache, "tokenize_pairs", counting)   # both loaders tokenize through the cache
    return calls


def same(a: TokenizedPairs, b: TokenizedPairs) -> bool:
    return all(np.array_equal(x, y) for x, y in
               [(a.prompt_ids, b.prompt_ids), (a.prompt_offsets, b.prompt_offsets), (a.output_lens, b.output_lens)])


def test_cache_hit_skips_tokenizing(data_dir, cache_dir, count_tokenizing):
    path = str(data_dir / "sharegpt_small.json")
    first = load_sharegpt(path, load_tokenizer("cl100k_base"))
    second = load_sharegpt(path, load_tokenizer("cl100k_base"))
    assert count_tokenizing == ["cl100k_base"]
    assert same(first, second)
    files = os.listdir(cache_dir)
    assert len(files) == 1 and files[0].endswith(".npz")  # no temp file left behind


def test_cache_hit_still_reports_truncation(data_dir, caplog):
    path = str(data_dir / "sharegpt_truncated.json")
    load_sharegpt(path, WordTokenizer())
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="workloads"):
        load_sharegpt(path, WordTokenizer())
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "from cache" in messages and "truncated" in messages


def test_key_changes_with_tokenizer(data_dir, cache_dir, count_tokenizing):
    path = data_dir / "sharegpt_small.json"
    assert cache_key("sharegpt", 1, path, "bpe_openai:cl100k_base") != cache_key("sharegpt", 1, path, "test:words")
    cl100k = load_sharegpt(str(path), load_tokenizer("cl100k_base"))
    words = load_sharegpt(str(path), WordTokenizer())
    assert count_tokenizing == ["cl100k_base", "words"]
    assert len(os.listdir(cache_dir)) == 2
    assert not same(cl100k, words)


def test_key_changes_with_loader_version_and_file(tmp_path, data_dir):
    path = tmp_path / "copy.json"
    path.write_bytes((data_dir / "sharegpt_small.json").read_bytes())
    before = cache_key("sharegpt", 1, path, "t")
    assert cache_key("sharegpt", 2, path, "t") != before
    assert cache_key("alpaca", 1, path, "t") != before
    os.utime(path, ns=(1, 1))
    assert cache_key("sharegpt", 1, path, "t") != before


def test_changed_file_is_tokenized_again(write_sharegpt, count_tokenizing):
    path = write_sharegpt([(5, 5)])
    assert load_sharegpt(str(path), WordTokenizer()).prompt_lens.tolist() == [5]
    write_sharegpt([(6, 5), (7, 5)])
    assert load_sharegpt(str(path), WordTokenizer()).prompt_lens.tolist() == [6, 7]
    assert len(count_tokenizing) == 2


def test_corrupt_cache_file_is_rebuilt(data_dir, cache_dir, count_tokenizing, caplog):
    path = str(data_dir / "sharegpt_small.json")
    first = load_sharegpt(path, WordTokenizer())
    (cache_file,) = cache_dir.iterdir()
    cache_file.write_bytes(b"not a zip file")
    with caplog.at_level(logging.WARNING, logger="workloads"):
        rebuilt = load_sharegpt(path, WordTokenizer())
    assert "ignoring unreadable cache file" in caplog.text
    assert same(first, rebuilt) and len(count_tokenizing) == 2
    load_sharegpt(path, WordTokenizer())  # the rebuilt file is good again
    assert len(count_tokenizing) == 2


def test_unwritable_cache_dir_still_loads(data_dir, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("PAGEDBENCH_CACHE_DIR", str(blocker / "cache"))
    with caplog.at_level(logging.WARNING, logger="workloads"):
        pairs = load_sharegpt(str(data_dir / "sharegpt_small.json"), WordTokenizer())
    assert len(pairs) == 5 and "could not write cache file" in caplog.text


def test_alpaca_files_are_cached_too(data_dir, count_tokenizing):
    path = str(data_dir / "alpaca_small.json")
    first = load_alpaca(path, WordTokenizer())
    assert same(first, load_alpaca(path, WordTokenizer()))
    assert count_tokenizing == ["words"]


def test_tokenized_pairs_layout():
    pairs = TokenizedPairs.from_lists([[1, 2, 3], [], [4]], [7, 8, 9])
    assert pairs.prompt_offsets.tolist() == [0, 3, 3, 4]
    assert pairs.prompt(0) == (1, 2, 3) and pairs.prompt(2) == (4,)
    assert pairs.prompt_lens.tolist() == [3, 0, 1] and len(pairs) == 3


@pytest.mark.parametrize(
    "ids, offsets, lens, message",
    [
        ([1, 2], [0, 2], [5, 6], "needs num_pairs \\+ 1 = 3"),
        ([1, 2], [0, 1], [5], "end at len\\(prompt_ids\\)"),
        ([1, 2], [0, 3, 2], [5, 6], "non-decreasing"),
    ],
)
def test_tokenized_pairs_validation(ids, offsets, lens, message):
    with pytest.raises(ValueError, match=message):
        TokenizedPairs(np.array(ids, np.int32), np.array(offsets, np.int64), np.array(lens, np.int32))


def test_tokenizing_in_chunks_gives_the_same_pairs(monkeypatch):
    texts = [(" ".join("w" * (i % 5 + 1) for _ in range(i % 7)), "x " * (i % 3 + 1)) for i in range(23)]
    whole = tokenize_pairs(texts, WordTokenizer())
    monkeypatch.setattr(pagedbench.workloads.pairs, "TOKENIZE_CHUNK", 4)
    tokenizer = WordTokenizer()
    assert same(tokenize_pairs(texts, tokenizer), whole) and tokenizer.calls == 2 * 6
    assert len(tokenize_pairs([], WordTokenizer())) == 0


def test_prefix_tags_of_pairs():
    plain = TokenizedPairs.from_lists([[1, 2, 3]], [4])
    assert plain.prefix(0) == (None, 0)
    tagged = TokenizedPairs(plain.prompt_ids, plain.prompt_offsets, plain.output_lens,
                            np.array([5], np.int64), np.array([2], np.int64))
    assert tagged.prefix(0) == (5, 2)


@pytest.mark.parametrize("ids, lens, message", [
    ([0], None, "go together"),
    ([0, 1], [1, 1], "one entry per pair"),
    ([0], [0], "needs a prefix_len > 0"),
    ([-1], [2], "needs a prefix_len > 0"),
    ([0], [3], "shorter than its prompt"),
])
def test_prefix_tags_validation(ids, lens, message):
    plain = TokenizedPairs.from_lists([[1, 2, 3]], [4])
    with pytest.raises(ValueError, match=message):
        TokenizedPairs(plain.prompt_ids, plain.prompt_offsets, plain.output_lens, np.array(ids, np.int64),
                       None if lens is None else np.array(lens, np.int64))


def test_a_prompt_is_a_read_only_view_that_behaves_as_the_tuple_of_its_ids():
    pairs = TokenizedPairs.from_lists([[5, 6, 7], [8]], [2, 3])
    ids = pairs.prompt(0)
    assert isinstance(ids, TokenIds) and np.shares_memory(np.asarray(ids), pairs.prompt_ids)
    assert ids == (5, 6, 7) and (5, 6, 7) == ids and ids != (5, 6) and ids != (5, 6, 8) and ids == TokenIds([5, 6, 7])
    assert hash(ids) == hash((5, 6, 7)) and {ids: 1}[(5, 6, 7)] == 1
    assert list(ids) == [5, 6, 7] and all(type(t) is int for t in ids) and type(ids[1]) is int and ids[-1] == 7
    assert ids[1:] == (6, 7) and len(ids) == 3 and 6 in ids and tuple(ids) == (5, 6, 7)
    with pytest.raises(ValueError):
        np.asarray(ids)[0] = 9          # the pool's ids cannot be changed through a request
    assert pairs.prompt_ids[0] == 5
    with pytest.raises(ValueError, match="one-dimensional"):
        TokenIds(np.zeros((2, 2)))
