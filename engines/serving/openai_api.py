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

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, field_validator

from pagedbench.engines.real.sampling import Sampling
from pagedbench.engines.serving.token_text import TokenText

COMPLETION_MAX_TOKENS = 16   # vLLM's (and OpenAI's) default for /v1/completions; chat fills the context
# Fields vLLM's protocol defines that these engines cannot honour: refused unless left at their default.
REFUSED = {"suffix": None, "logit_bias": None, "presence_penalty": 0, "frequency_penalty": 0,
           "repetition_penalty": 1, "min_p": 0, "min_tokens": 0, "tools": None, "functions": None,
           "function_call": None, "guided_json": None, "guided_regex": None, "guided_choice": None}


class Options(BaseModel):
    """The sampling, stopping and shape fields of a completions or chat body, checked as vLLM's protocol
    types them (pydantic). Other fields are accepted and ignored, as vLLM accepts them."""

    model_config = ConfigDict(extra="allow")
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: StrictInt | None = Field(None, ge=-1)
    seed: StrictInt | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[StrictInt] | None = None
    echo: StrictBool | None = None
    n: StrictInt | None = Field(None, ge=1)
    best_of: StrictInt | None = Field(None, ge=1)
    response_format: dict | None = None
    tool_choice: str | dict | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, value):
        stops = [value] if isinstance(value, str) else list(value or [])
        if any(not s for s in stops):
            raise ValueError("a stop string must not be empty")
        return stops

    def sampling(self) -> Sampling:
        return Sampling(1.0 if self.temperature is None else self.temperature,
                        1.0 if self.top_p is None else self.top_p, self.top_k or 0, self.seed)


def options(body: dict, chat: bool) -> Options:
    """The body's Options, or a BadRequest naming the field (`param`) that is wrong or cannot be honoured."""
    try:
        opts = Options.model_validate(body)
    except ValidationError as err:
        first = err.errors()[0]
        param = str(first["loc"][0]) if first["loc"] else None   # the body's field (not the union member)
        raise BadRequest(f"{param}: {first['msg']}", "invalid_request", param=param) from None
    for key, default in REFUSED.items():
        if body.get(key) not in (None, default):
            raise BadRequest(f"{key} is not supported by these engines (leave it out)", "unsupported_parameter",
                             param=key)
    if (opts.n or 1) > 1 or (opts.best_of or 1) > 1:
        param = "n" if (opts.n or 1) > 1 else "best_of"
        raise BadRequest(f"{param} must be 1: the server streams one sequence per request", "unsupported_n",
                         param=param)
    if opts.response_format is not None and opts.response_format.get("type") not in (None, "text"):
        raise BadRequest("response_format: only {\"type\": \"text\"} is supported (no structured output)",
                         "unsupported_parameter", param="response_format")
    if opts.tool_choice not in (None, "none"):
        raise BadRequest("tool_choice: tools are not supported", "unsupported_parameter", param="tool_choice")
    if chat and opts.echo:
        raise BadRequest("echo is for /v1/completions", "invalid_request", param="echo")
    return opts


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
    sampling: Sampling = field(default_factory=lambda: Sampling(0.0))   # the request's own (vLLM's default: 1.0)
    stop: tuple[str, ...] = ()         # text that ends the output (not included), finish_reason "stop"
    stop_token_ids: tuple[int, ...] = ()   # tokens that end the output (not included)
    echo: bool = False                 # completions: the prompt's text before the output
    batch: list[list[int]] = field(default_factory=list)   # a list of prompts: every one's ids (prompt_ids is the first)


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _flag(body: dict, key: str) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise BadRequest(f"{key} must be true or false, got {value!r}", param=key)
    return bool(value)


def _prompt_ids(body: dict, chat: bool, text: TokenText, vocab_size: int | None = None) -> list[list[int]]:
    """The prompts' ids: one prompt, or each of a list of prompts (strings or lists of ids)."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise BadRequest("messages must be a non-empty list of {role, content} objects", param="messages")
        return [text.chat_ids([{**m, "content": _content(m.get("content"))} for m in messages])]
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) or (isinstance(p, list) and p)
                                                   for p in prompt):
        return [_one_prompt(p, text, vocab_size) for p in prompt]   # a batch of prompts
    return [_one_prompt(prompt, text, vocab_size)]


def _one_prompt(prompt, text: TokenText, vocab_size: int | None) -> list[int]:
    if isinstance(prompt, str):
        return text.encode(prompt)
    if isinstance(prompt, list) and all(_int(t) and t >= 0 for t in prompt):
        bad = next((i for i, t in enumerate(prompt) if vocab_size is not None and t >= vocab_size), None)
        if bad is not None:
            raise BadRequest(f"prompt token {bad} is id {prompt[bad]}, outside the model's vocabulary of {vocab_size} "
                             f"ids (0..{vocab_size - 1})", "invalid_token_id", param="prompt")
        return prompt
    raise BadRequest("prompt must be a string, a list of token ids (ints >= 0), or a list of either",
                     param="prompt")


def _content(content) -> str:
    """A message's text: a string, or the text parts of a list of parts; None (no content) is ""."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise BadRequest(f"a message's content must be a string or a list of parts, got {type(content).__name__}",
                     param="messages")


def parse_body(raw: bytes, chat: bool, text: TokenText, max_seq_len: int | None,
               vocab_size: int | None = None) -> ParsedRequest:
    """Check a request body. Its sampling (temperature, default 1.0 as vLLM's; top_p, top_k, seed), stop
    strings and token ids, echo and a list of prompts are honoured; fields these engines cannot honour are
    refused by name (`Options`, `REFUSED`); unknown fields (ignore_eos, user, ...) are accepted and ignored.
    The model it names is returned for the server to check against the names it serves.
    Without max_tokens (for chat, max_completion_tokens, which wins when both are given) a request gets the
    rest of the context on chat, `max_seq_len` minus its prompt, and 16 tokens on completions, as vLLM gives
    them; logprobs are refused (not computed). A prompt of token ids must lie in the model's vocabulary (`vocab_size`, when the engine has
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
        raise BadRequest(f"max_tokens must be an integer >= 1, got {max_tokens!r}", param="max_tokens")
    for key in ("logprobs", "top_logprobs", "prompt_logprobs"):
        if body.get(key) not in (None, False):
            raise BadRequest(f"{key} is not supported: these engines do not compute log-probabilities (leave "
                             f"it out or null)", "unsupported_logprobs", param=key)
    opts = options(body, chat)
    stream = _flag(body, "stream")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise BadRequest(f"stream_options must be an object, got {stream_options!r}", param="stream_options")
    batch = _prompt_ids(body, chat, text, vocab_size)
    if not all(batch):
        raise BadRequest("the prompt is empty: it must hold at least one token", "empty_prompt", param="prompt")
    if len(batch) > 1 and stream:
        raise BadRequest("a list of prompts is answered whole: send one request per prompt to stream",
                         "unsupported_parameter", param="prompt")
    ids = max(batch, key=len)          # the longest decides whether max_tokens fits
    if max_tokens is None and not chat:
        max_tokens = COMPLETION_MAX_TOKENS
        if max_seq_len is not None:
            max_tokens = min(max_tokens, max_seq_len - len(ids))
            if max_tokens < 1:
                raise BadRequest(f"the prompt ({len(ids)} tokens) leaves no room for a token within the model's "
                                 f"max_seq_len of {max_seq_len}", "context_length_exceeded", param="prompt")
    if max_tokens is None:             # chat, as vLLM: the rest of the context
        if max_seq_len is None:
            raise BadRequest("max_tokens is required: this server has no max_seq_len to fill",
                             "missing_max_tokens")
        max_tokens = max_seq_len - len(ids)
        if max_tokens < 1:
            raise BadRequest(f"the prompt ({len(ids)} tokens) leaves no room for a token within the model's "
                             f"max_seq_len of {max_seq_len}", "context_length_exceeded", param="prompt")
    if max_seq_len is not None and len(ids) + max_tokens > max_seq_len:
        raise BadRequest(f"prompt ({len(ids)} tokens) + max_tokens ({max_tokens}) = {len(ids) + max_tokens} "
                         f"exceeds the model's max_seq_len of {max_seq_len}", "context_length_exceeded",
                         param="max_tokens")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest(f"model must be a string, got {model!r}", param="model")
    return ParsedRequest(chat, batch[0], max_tokens, stream, _flag(stream_options, "include_usage"),
                         _flag(body, "return_token_ids"), model, opts.sampling(), tuple(opts.stop or ()),
                         tuple(opts.stop_token_ids or ()), bool(opts.echo), batch)


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

    def stop_chunk(self, text: str, reason: str | int) -> dict:
        """The end of a stream cut by a stop string or token: the text let out with it, finish_reason "stop"."""
        choice: dict = {"index": 0, "finish_reason": "stop", "stop_reason": reason}
        if self.parsed.chat:
            choice["delta"] = {"content": text} if text else {}
        else:
            choice["text"] = text
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

    def choice(self, token_ids: list[int], text: str, index: int = 0, stop_reason: str | int | None = None) -> dict:
        """One answer of a request that did not stream (`stop_reason` set: cut by a stop)."""
        choice: dict = {"index": index, "finish_reason": "length" if stop_reason is None else "stop"}
        if stop_reason is not None:
            choice["stop_reason"] = stop_reason
        if self.parsed.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice.update(text=text, logprobs=None)
        if self.parsed.return_token_ids:
            choice["token_ids"] = token_ids
        return choice

    def whole(self, token_ids: list[int], text: str, stop_reason: str | int | None = None) -> dict:
        """The response of a request that did not stream."""
        return self.whole_of([self.choice(token_ids, text, 0, stop_reason)], len(self.parsed.prompt_ids),
                             len(token_ids))

    def whole_of(self, choices: list[dict], prompt_tokens: int, completion_tokens: int) -> dict:
        """The response holding `choices` (one per prompt of a list), with the usage of them all."""
        return {"id": self.id, "object": "chat.completion" if self.parsed.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}
