"""ShareGPT's multi-turn conversations as chat requests (the paper's Figure 17).

Every assistant reply of a conversation is one (prompt, output) pair: the
prompt is every earlier turn, joined with blank lines and tokenized, and the
output is the reply. A conversation with k replies after its first turn so
gives k pairs, each prompt holding the one before it. The paper's chatbot
rule then cuts each prompt to its LAST `max_prompt_len` tokens (1024: the
recent history the model still sees) and each output to at most
`max_output_len` tokens (the cut happens in `build_workload`).

The file is walked as `sharegpt.py` walks it (a truncated or corrupt file
keeps every complete conversation before the break). A reply is a turn
from the assistant's side (`ASSISTANT_ROLES`); a reply that opens the
conversation has no history and gives no pair; a turn without text ends its
conversation there. The full histories are tokenized once and cached (as
`sharegpt_chat`); the cut to `max_prompt_len` is made on the cached tokens,
so one cache entry serves every length.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from workloads.cache import read_and_tokenize
from workloads.pairs import TokenizedPairs
from workloads.sharegpt import conversation_turns, read_conversations, report_read, with_sharegpt_file

log = logging.getLogger("workloads")

LOADER = "sharegpt_chat"
LOADER_VERSION = 1
ASSISTANT_ROLES = ("gpt", "chatgpt", "bard", "bing", "assistant")   # "from" of a reply; ShareGPT uses "gpt"
TURN_SEPARATOR = "\n\n"


def load_chat(path: str | None, tokenizer, max_prompt_len: int) -> TokenizedPairs:
    """Every (history, reply) pair of a ShareGPT file (default: the packaged
    copy), tokenized through the cache, prompts cut to their last `max_prompt_len` tokens."""
    return keep_last_tokens(with_sharegpt_file(path, lambda file: _load(file, tokenizer)), max_prompt_len)


def _load(path: Path, tokenizer) -> TokenizedPairs:
    pairs, info = read_and_tokenize(LOADER, LOADER_VERSION, path, tokenizer, read_sharegpt_chat)
    report_read(path, info, "chat: read %d conversations from %s, %d replies with a history")
    return pairs


def read_sharegpt_chat(path: Path) -> tuple[list[tuple[str, str]], dict]:
    """Every (history, reply) pair in file order, and read_sharegpt's summary."""
    return read_conversations(path, chat_pairs, "(an assistant reply after at least one turn with text)")


def chat_pairs(record: object) -> list[tuple[str, str]]:
    """(every earlier turn joined, the reply) for each assistant reply of a ShareGPT record."""
    pairs = []
    history: list[str] = []
    for turn in conversation_turns(record):
        text = turn.get("value") if isinstance(turn, dict) else None
        if not isinstance(text, str):
            break
        if history and turn.get("from") in ASSISTANT_ROLES:
            pairs.append((TURN_SEPARATOR.join(history), text))
        history.append(text)
    return pairs


def keep_last_tokens(pairs: TokenizedPairs, max_len: int) -> TokenizedPairs:
    """`pairs` with every prompt cut to its last `max_len` tokens (shorter ones unchanged)."""
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    ends = pairs.prompt_offsets[1:]
    lens = np.minimum(pairs.prompt_lens, max_len)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    # token k of the new array comes from old position k + (old start - new start) of its prompt
    shift = np.repeat(ends - lens - offsets[:-1], lens)
    ids = pairs.prompt_ids[np.arange(offsets[-1], dtype=np.int64) + shift]
    return TokenizedPairs(ids, offsets, pairs.output_lens)
