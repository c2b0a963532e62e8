"""The OpenAI wire format: a request body checked and parsed, and the JSON bodies of its response.

`parse_body` turns a /v1/completions or /v1/chat/completions body into a
`ParsedRequest` (its prompt as token ids) or raises `BadRequest` (HTTP 400,
with the OpenAI error's `code`). `Reply` builds what one request sends
back: a chunk per token when streamed (the last one with finish_reason
"length"), the usage chunk (`"choices": []`), or the whole response.
Our engines generate exactly max_tokens, so "length" is the only finish.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import json
import time
import uuid

from pagedbench.engines.serving.token_text import TokenText


class BadRequest(ValueError):
    """A request the server refuses with HTTP 400; `code` and `param` (the field at fault) go in the OpenAI
    error body."""

    def __init__(self, message: str, code: str = "invalid_request", param: str | None = None):
        super().__init__(message)
        self.code = code
        self.param = param


def error_body(message: str, code: str, kind: str = "invalid_request_error", param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass(slots=True)
class ParsedRequest:
    """A checked request: its prompt as token ids and exactly how many tokens to generate."""

    chat: bool
    prompt_ids: list[int]
    max_tokens: int
    stream: bool = False
    include_usage: bool = False        # stream_options.include_usage
    return_token_ids: bool = False     # each choice also carries its token ids (`token_ids`)
    model: str | None = None           # the model the body names (None: not named, the server's first)


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _flag(body: dict, key: str) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise BadRequest(f"{key} must be true or false, got {value!r}")
    return bool(value)


def _prompt_ids(body: dict, chat: bool, text: TokenText, vocab_size: int | None = None) -> list[int]:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise BadRequest("messages must be a non-empty list of {role, content} objects")
        return text.encode("\n".join(_content(m.get("content")) for m in messages))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and not _int(prompt[0]):
        prompt = prompt[0]             # a batch of one prompt
    if isinstance(prompt, str):
        return text.encode(prompt)
    if isinstance(prompt, list) and all(_int(t) and t >= 0 for t in prompt):
        bad = next((i for i, t in enumerate(prompt) if vocab_size is not None and t >= vocab_size), None)
        if bad is not None:
            raise BadRequest(f"prompt token {bad} is id {prompt[bad]}, outside the model's vocabulary of {vocab_size} "
                             f"ids (0..{vocab_size - 1})", "invalid_token_id")
        return prompt
    raise BadRequest("prompt must be a string or a list of token ids (ints >= 0), one prompt per request")


def _content(content) -> str:
    """A message's text: a string, or the text parts of a list of parts; None (no content) is ""."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise BadRequest(f"a message's content must be a string or a list of parts, got {type(content).__name__}")


def parse_body(raw: bytes, chat: bool, text: TokenText, max_seq_len: int | None,
               vocab_size: int | None = None) -> ParsedRequest:
    """Check a request body; unknown fields (temperature, ignore_eos, ...) are accepted and ignored; the
    model it names is returned for the server to check against the names it serves.
    Without max_tokens (for chat, max_completion_tokens, which wins when both are given) a request gets the
    rest of the context, `max_seq_len` minus its prompt, as vLLM gives it; logprobs are refused (not
    computed). A prompt of token ids must lie in the model's vocabulary (`vocab_size`, when the engine has
    one): an id outside it gets a 400 naming it, as vLLM answers, never a silent fold."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise BadRequest(f"the body is not valid JSON: {err}", "invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    max_tokens = body.get("max_tokens")
    if chat and body.get("max_completion_tokens") is not None:     # the chat's own name wins, as OpenAI's
        max_tokens = body["max_completion_tokens"]
    if max_tokens is not None and (not _int(max_tokens) or max_tokens < 1):
        raise BadRequest(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
    for key in ("logprobs", "top_logprobs", "prompt_logprobs"):
        if body.get(key) not in (None, False):
            raise BadRequest(f"{key} is not supported: these engines do not compute log-probabilities (leave "
                             f"it out or null)", "unsupported_logprobs")
    n = body.get("n", 1)
    if n is not None and n != 1:
        raise BadRequest(f"n must be 1 (one sequence per request), got {n!r}", "unsupported_n")
    stream = _flag(body, "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest(f"stream_options must be an object, got {options!r}")
    ids = _prompt_ids(body, chat, text, vocab_size)
    if not ids:
        raise BadRequest("the prompt is empty: it must hold at least one token", "empty_prompt")
    if max_tokens is None:             # as vLLM: the rest of the context
        if max_seq_len is None:
            raise BadRequest("max_tokens is required: this server has no max_seq_len to fill",
                             "missing_max_tokens")
        max_tokens = max_seq_len - len(ids)
        if max_tokens < 1:
            raise BadRequest(f"the prompt ({len(ids)} tokens) leaves no room for a token within the model's "
                             f"max_seq_len of {max_seq_len}", "context_length_exceeded")
    if max_seq_len is not None and len(ids) + max_tokens > max_seq_len:
        raise BadRequest(f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) = {len(ids) + max_tokens} "
                         f"exceeds the model's max_seq_len of {max_seq_len}", "context_length_exceeded")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest(f"model must be a string, got {model!r}", param="model")
    return ParsedRequest(chat, ids, max_tokens, stream, _flag(options, "include_usage"),
                         _flag(body, "return_token_ids"), model)


@dataclass(slots=True)
class Reply:
    """One response: its id and creation time, and the bodies it sends for `parsed` as `model`."""

    parsed: ParsedRequest
    model: str
    id: str = field(init=False)
    created: int = field(init=False)

    def __post_init__(self) -> None:
        self.id = f"{'chatcmpl' if self.parsed.chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    @property
    def chunk_object(self) -> str:
        return "chat.completion.chunk" if self.parsed.chat else "text_completion"

    def usage(self, completion_tokens: int) -> dict:
        prompt = len(self.parsed.prompt_ids)
        return {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                "total_tokens": prompt + completion_tokens}

    def chunk(self, token_id: int, text: str, last: bool) -> dict:
        """One streamed token (the last one with finish_reason "length")."""
        choice: dict = {"index": 0}
        if self.parsed.chat:
            choice["delta"] = {"content": text}
        else:
            choice["text"] = text
        choice["finish_reason"] = "length" if last else None
        if self.parsed.return_token_ids:
            choice["token_ids"] = [token_id]
        return self._chunk_of(choice)

    def role_chunk(self) -> dict:
        """A chat stream's first chunk, before its first token's: the role alone, as vLLM sends it."""
        return self._chunk_of({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None})

    def closing_chunk(self, text: str) -> dict:
        """The finish of a stream that ended before max_tokens, with whatever text was still held back."""
        choice: dict = {"index": 0, "finish_reason": "length"}
        if self.parsed.chat:
            choice["delta"] = {"content": text} if text else {}
        else:
            choice["text"] = text
        return self._chunk_of(choice)

    def _chunk_of(self, choice: dict) -> dict:
        return {"id": self.id, "object": self.chunk_object, "created": self.created, "model": self.model,
                "choices": [choice]}

    def usage_chunk(self, completion_tokens: int) -> dict:
        return {"id": self.id, "object": self.chunk_object, "created": self.created, "model": self.model,
                "choices": [], "usage": self.usage(completion_tokens)}

    def whole(self, token_ids: list[int], text: str) -> dict:
        """The response of a request that did not stream."""
        choice: dict = {"index": 0, "finish_reason": "length"}
        if self.parsed.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice.update(text=text, logprobs=None)
        if self.parsed.return_token_ids:
            choice["token_ids"] = token_ids
        return {"id": self.id, "object": "chat.completion" if self.parsed.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [choice],
                "usage": self.usage(len(token_ids))}
