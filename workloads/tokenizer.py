"""Tokenizers that turn dataset text into token ids, named by a spec string.

- "cl100k_base" (or any other `bpe_openai` encoding name): loads offline.
- "hf:/local/dir": a Hugging Face tokenizer saved in a local directory,
  loaded with `local_files_only=True`, never from the network.

Every tokenizer has `.name`, `.fingerprint` (a string that changes whenever
its token ids could: the spec plus, for a directory, its files' sizes and
mtimes) and `.encode(text) -> list[int]` / `.encode_batch(texts)`.
"""
from __future__ import annotations

import os
from pathlib import Path

HF_PREFIX = "hf:"


class BpeTokenizer:
    """A `bpe_openai` encoding. Text that looks like a special token
    ("<|endoftext|>") is encoded as plain text, since it is data here."""

    def __init__(self, encoding_name: str) -> None:
        import bpe_openai

        try:
            self._encoding = bpe_openai.get_encoding(encoding_name)
        except Exception as err:  # unknown names, and encodings that need files not shipped offline
            raise ValueError(f"cannot load bpe_openai encoding {encoding_name!r}: {err}") from err
        self.name = encoding_name
        self.fingerprint = f"bpe_openai:{encoding_name}"

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode_ordinary(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self._encoding.encode_ordinary_batch(texts, num_threads=os.cpu_count() or 1)


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
