"""A tokenizer for tests: one token per whitespace-separated word."""
from __future__ import annotations


class WordTokenizer:
    name = "words"
    fingerprint = "test:words"

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, text: str) -> list[int]:
        return [len(w) for w in text.split()]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        self.calls += 1
        return [self.encode(t) for t in texts]
