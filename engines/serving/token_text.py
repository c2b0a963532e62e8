"""The server's tokenizer, both ways: prompt text to token ids, and output token ids to text, one at a time.

Prompts are encoded exactly as the workloads encode text
(`pagedbench.workloads.tokenizer.load_tokenizer`, so a spec names the same ids in a
trace and on the wire). Output tokens become text token by token: a UTF-8
character split across tokens comes out whole with the token that completes
it, so some tokens' text is "". A bpe_openai encoding gives each token's
bytes exactly (`TextPieces`: an incremental UTF-8 decoder over them). A
Hugging Face tokenizer's token is not always whole bytes on its own (byte-level
BPE marks bytes with printable stand-ins, SentencePiece marks spaces and byte
fallbacks), so its tokens go through the library's own incremental decoder,
`tokenizers.decoders.DecodeStream` (`StreamPieces`), as vLLM's do: the text of
a stream is the text of the whole decode. The model's ids need not be the
tokenizer's (the tiny model has random weights and its own vocabulary size):
an id the tokenizer cannot decode is "" too, never an error.
"""
from __future__ import annotations

import codecs
from collections.abc import Callable
from pathlib import Path

from pagedbench.workloads.tokenizer import HF_PREFIX, load_tokenizer


class TokenText:
    """Text -> ids with `pagedbench.workloads.tokenizer.load_tokenizer(spec)`; id -> its bytes with the same vocabulary."""

    def __init__(self, spec: str):
        self.spec = spec
        self.encoder = load_tokenizer(spec)
        if spec.startswith(HF_PREFIX):
            from transformers import AutoTokenizer

            hf = AutoTokenizer.from_pretrained(str(Path(spec[len(HF_PREFIX):]).expanduser().resolve()),
                                               local_files_only=True)
            self._vocab = len(hf)
            self._hf = hf
            self._bytes: Callable[[int], bytes] = lambda token: hf.decode([token]).encode()
        else:
            import bpe_openai

            encoding = bpe_openai.get_encoding(spec)
            self._hf = None
            self._vocab = encoding.n_vocab
            self._bytes = encoding.decode_single_token_bytes

    def encode(self, text: str) -> list[int]:
        return self.encoder.encode(text)

    def chat_ids(self, messages: list[dict]) -> list[int]:
        """A chat's prompt: through the tokenizer's chat template where it has one (with the assistant's turn
        opened, as vLLM's default), else the messages' text joined by lines."""
        if self._hf is not None and getattr(self._hf, "chat_template", None):
            ids = self._hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            return list(ids["input_ids"] if hasattr(ids, "keys") else ids)   # a BatchEncoding in transformers 5
        return self.encode("\n".join(m.get("content") or "" for m in messages))

    def token_bytes(self, token_id: int) -> bytes:
        """The token's UTF-8 bytes; b"" for an id outside the vocabulary or in one of its gaps."""
        if not 0 <= token_id < self._vocab:
            return b""
        try:
            return self._bytes(token_id)
        except Exception:   # bpe_openai: KeyError for an undefined id; never let a token stop a stream
            return b""

    def decoder(self) -> "TextPieces | StreamPieces":
        """One response's text, token by token."""
        return TextPieces(self) if self._hf is None else StreamPieces(self._hf.backend_tokenizer, self._vocab)

    def decode(self, token_ids: list[int]) -> str:
        """The text of `token_ids` at once (ids the vocabulary lacks left out), as /detokenize answers."""
        ids = [t for t in token_ids if 0 <= t < self._vocab]
        if self._hf is not None:
            return self._hf.decode(ids, skip_special_tokens=False)
        return b"".join(self.token_bytes(t) for t in ids).decode("utf-8", "replace")


class TextPieces:
    """One response's text, token by token."""

    def __init__(self, text: TokenText):
        self._text = text
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def add(self, token_id: int, final: bool = False) -> str:
        """The text this token completes ("" while a character is still partial); `final` flushes the rest."""
        return self._utf8.decode(self._text.token_bytes(token_id), final=final)

    def flush(self) -> str:
        """What is held back of a partial character, at the end ("" when nothing is)."""
        return self._utf8.decode(b"", final=True)


class StreamPieces:
    """One response's text through a Hugging Face tokenizer's incremental decoder (`DecodeStream`)."""

    def __init__(self, core, vocab: int):
        from tokenizers.decoders import DecodeStream

        self._core, self._vocab = core, vocab
        self._stream = DecodeStream(skip_special_tokens=False)

    def add(self, token_id: int, final: bool = False) -> str:
        """The text this token completes ("" while the decoder holds it back, or for an id it cannot decode)."""
        if not 0 <= token_id < self._vocab:
            return ""
        try:
            return self._stream.step(self._core, token_id) or ""
        except Exception:   # never let a token stop a stream
            return ""

    def flush(self) -> str:
        """The decoder keeps no partial character to flush: what it held back is not text."""
        return ""
