"""Tokenizers that turn dataset text into token ids, named by a spec string.

- "cl100k_base" (or any other `bpe_openai` encoding name): loads offline.
- "hf:/local/dir": a Hugging Face tokenizer saved in a local directory,
  loaded with `local_files_only=True`, never from the network.

Every tokenizer has `.name`, `.fingerprint` (a string that changes whenever
its token ids could: the spec plus, for a directory, its files' sizes and
mtimes) and `.encode(text) -> list[int]` / `.encode_batch(texts)`.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

HF_PREFIX = "hf:"


class BpeTokenizer:
    """A `bpe_openai` encoding. Text that looks like a special token
    ("<|endoftext|>") is encoded as plain text, since it is data here.

    Importing `bpe_openai` reads every encoding it ships (about 1.5 s), and a
    run whose pairs come from the cache (`pagedbench.workloads.cache`) encodes nothing:
    the package is imported at the first `encode`. A name the package does not
    ship as a data file is checked at once, so a wrong name still fails here.
    """

    def __init__(self, encoding_name: str) -> None:
        self.name = encoding_name
        self.fingerprint = f"bpe_openai:{encoding_name}"
        self._encoding = None
        if not _ships_encoding(encoding_name):
            self._load()

    def _load(self):
        if self._encoding is None:
            import bpe_openai

            try:
                self._encoding = bpe_openai.get_encoding(self.name)
            except Exception as err:  # unknown names, and encodings that need files not shipped offline
                raise ValueError(f"cannot load bpe_openai encoding {self.name!r}: {err}") from err
        return self._encoding

    def encode(self, text: str) -> list[int]:
        return self._load().encode_ordinary(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._load().encode_ordinary_batch(texts, num_threads=os.cpu_count() or 1)


def _ships_encoding(name: str) -> bool:
    """Whether the installed `bpe_openai` has `name`'s data file (found without importing the package)."""
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or spec.origin is None or not name.replace("_", "").isalnum():
        return False
    return (Path(spec.origin).parent / "data" / f"{name}.tiktoken.gz").is_file()


class HfTokenizer:
    """A Hugging Face tokenizer from a local directory. Encodes as vLLM's
    throughput benchmark does, `tokenizer(text).input_ids`, so a BOS token
    is counted where the model's tokenizer adds one."""

    def __init__(self, directory: str) -> None:
        path = Path(directory).expanduser().resolve()
        if not path.is_dir():
            raise ValueError(f"tokenizer directory {str(path)!r} does not exist")
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.name = f"{HF_PREFIX}{path}"
        files = sorted(p for p in path.iterdir() if p.is_file())
        stamps = ",".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)
        self.fingerprint = f"hf:{path}|{stamps}"

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer(text).input_ids)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        return [list(ids) for ids in self._tokenizer(texts).input_ids]


def load_tokenizer(spec: str) -> BpeTokenizer | HfTokenizer:
    """The tokenizer named by `spec`: a bpe_openai encoding name or "hf:/local/dir"."""
    if spec.startswith(HF_PREFIX):
        return HfTokenizer(spec[len(HF_PREFIX):])
    return BpeTokenizer(spec)
