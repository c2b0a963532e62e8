"""Alpaca instructions as (prompt, completion) pairs, read from `alpaca_data.json`.

The file is a JSON list of {"instruction", "input", "output"}. The prompt is
the instruction, followed by a blank line and the input when there is one;
the completion is the output. Records without a string instruction and
output are skipped. With no file, see `alpaca_synthetic.py`.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from pagedbench.workloads.cache import read_and_tokenize
from pagedbench.workloads.pairs import TokenizedPairs

log = logging.getLogger("workloads")

LOADER_VERSION = 1


def load_alpaca(path: str, tokenizer) -> TokenizedPairs:
    """Tokenized pairs of an alpaca_data.json file, through the cache."""
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"Alpaca file {str(file)!r} does not exist")

    pairs, info = read_and_tokenize("alpaca", LOADER_VERSION, file, tokenizer, read_alpaca)
    log.info("alpaca: read %d records from %s, %d usable", info["records"], file, info["pairs"])
    return pairs


def read_alpaca(path: Path) -> tuple[list[tuple[str, str]], dict]:
    """Every usable (prompt, completion) pair in file order, and
    {"records": list length, "pairs": usable ones}."""
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"Alpaca file {str(path)!r} is not valid JSON: {err}") from err
    if not isinstance(records, list):
        raise ValueError(f"Alpaca file {str(path)!r} must hold a JSON list, got {type(records).__name__}")
    pairs = [pair for pair in map(alpaca_pair, records) if pair is not None]
    if not pairs:
        raise ValueError(
            f"no usable Alpaca record (string 'instruction' and 'output') in {str(path)!r}: "
            f"read {len(records)} records"
        )
    return pairs, {"records": len(records), "pairs": len(pairs)}


def alpaca_pair(record: object) -> tuple[str, str] | None:
    """(instruction + "\\n\\n" + input, output), or None for a malformed record."""
    if not isinstance(record, dict):
        return None
    instruction, extra, output = record.get("instruction"), record.get("input", ""), record.get("output")
    if not (isinstance(instruction, str) and isinstance(output, str)):
        return None
    prompt = instruction + ("\n\n" + extra if isinstance(extra, str) and extra else "")
    return prompt, output
