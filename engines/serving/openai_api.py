"""The OpenAI wire format: a request body checked and parsed, and the JSON bodies of its response.

`parse_body` turns a /v1/completions or /v1/chat/completions body into a
`ParsedRequest` (its prompt as token ids) or raises `BadRequest` (HTTP 400,
with the OpenAI error's `code`). `Reply` builds what one request sends
back: a chunk per token and choice when streamed (the last one with
finish_reason "length", or "stop"), the usage chunk (`"choices": []`), or
the whole response; with the tokens' log-probabilities where asked, in
completions' form (`tokens`, `token_logprobs`, `top_logprobs`,
`text_offset`) or chat's (`content`: token, logprob, bytes, top_logprobs).
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
MAX_LOGPROBS = 20            # vLLM's default max_logprobs: the most top log-probabilities a request may ask
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

    def sampling(self, logprobs: int | None = None) -> Sampling:
        return Sampling(1.0 if self.temperature is None else self.temperature,
                        1.0 if self.top_p is None else self.top_p, self.top_k or 0, self.seed, logprobs)


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
    if opts.best_of is not None and opts.best_of < (opts.n or 1):
        raise BadRequest(f"best_of ({opts.best_of}) must be >= n ({opts.n})", param="best_of")
    if (opts.best_of or 1) > (opts.n or 1) and body.get("stream"):
        raise BadRequest("best_of > n cannot stream: the best n are known only when every sequence has ended "
                         "(leave best_of out, or equal to n)", "unsupported_parameter", param="best_of")
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
    n: int = 1                         # choices per prompt
    best_of: int = 1                   # samples drawn per prompt (>= n): the n with the highest summed logprob answer
    logprobs: int | None = None        # the top log-probabilities each output token reports; None: none reported

    @property
    def width(self) -> int:
        """The rows the engine runs for one prompt: best_of parallel samples."""
        return max(self.n, self.best_of)


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
    them. `logprobs` (completions: 0..20 top tokens; chat: `logprobs` true and `top_logprobs` 0..20) are the
    model's (`pagedbench.engines.real.logprobs`); prompt logprobs (and echo with logprobs, which returns them) are
    refused. `n` choices per prompt, `best_of` >= n samples of which the n most likely answer. A prompt of token ids must lie in the model's vocabulary (`vocab_size`, when the engine has
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
    logprobs = _logprobs(body, chat)
    opts = options(body, chat)
    if logprobs is not None and opts.echo:
        raise BadRequest("echo with logprobs would return the prompt's log-probabilities, which are not computed "
                         "(leave one out)", "unsupported_logprobs", param="echo")
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
    n = opts.n or 1
    best_of = opts.best_of or n
    # best_of > n ranks its samples by their summed logprob: computed then, whether or not the reply shows them.
    computed = logprobs if logprobs is not None or best_of == n else 0
    return ParsedRequest(chat, batch[0], max_tokens, stream, _flag(stream_options, "include_usage"),
                         _flag(body, "return_token_ids"), model, opts.sampling(computed), tuple(opts.stop or ()),
                         tuple(opts.stop_token_ids or ()), bool(opts.echo), batch, n, best_of, logprobs)


def _logprobs(body: dict, chat: bool) -> int | None:
    """How many top log-probabilities each output token reports (0: the chosen token's alone), or None: none.
    Completions ask with `logprobs` (an integer); chat with `logprobs: true` and `top_logprobs`. Past vLLM's
    max_logprobs (20) is a 400 naming the field."""
    if body.get("prompt_logprobs") is not None:
        raise BadRequest("prompt_logprobs is not supported: the prompt's log-probabilities are not computed",
                         "unsupported_logprobs", param="prompt_logprobs")
    if chat:
        asked, top = body.get("logprobs"), body.get("top_logprobs")
        if asked is not None and not isinstance(asked, bool):
            raise BadRequest(f"logprobs must be true or false on chat, got {asked!r}", param="logprobs")
        if top is not None:
            if not _int(top) or not 0 <= top <= MAX_LOGPROBS:
                raise BadRequest(f"top_logprobs must be an integer 0..{MAX_LOGPROBS}, got {top!r}",
                                 param="top_logprobs")
            if not asked:
                raise BadRequest("top_logprobs needs logprobs: true", param="top_logprobs")
        return (top or 0) if asked else None
    if body.get("top_logprobs") is not None:
        raise BadRequest("top_logprobs is chat's: completions ask with logprobs (an integer)", param="top_logprobs")
    asked = body.get("logprobs")
    if asked is None:
        return None
    if not _int(asked) or not 0 <= asked <= MAX_LOGPROBS:
        raise BadRequest(f"logprobs must be an integer 0..{MAX_LOGPROBS} on completions, got {asked!r}",
                         param="logprobs")
    return asked


@dataclass(slots=True)
class Reply:
    """One response: its id and creation time, and the bodies it sends for `parsed` as `model` (`tokens`: the
    server's tokenizer, which names the tokens of log-probabilities). A choice's `index` is its place among
    the response's choices: prompt p's choice c of n is p * n + c."""

    parsed: ParsedRequest
    model: str
    tokens: TokenText | None = None
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

    def chunk(self, token_id: int, text: str, last: bool, index: int = 0, logprobs: dict | None = None) -> dict:
        """One streamed token of choice `index` (the last one with finish_reason "length")."""
        choice: dict = {"index": index}
        if self.parsed.chat:
            choice["delta"] = {"content": text}
        else:
            choice["text"] = text
        if logprobs is not None:
            choice["logprobs"] = logprobs
        choice["finish_reason"] = "length" if last else None
        if self.parsed.return_token_ids:
            choice["token_ids"] = [token_id]
        return self._chunk_of(choice)

    def stop_chunk(self, text: str, reason: str | int, index: int = 0, logprobs: dict | None = None) -> dict:
        """The end of a stream cut by a stop string or token: the text let out with it, finish_reason "stop"."""
        choice: dict = {"index": index, "finish_reason": "stop", "stop_reason": reason}
        if self.parsed.chat:
            choice["delta"] = {"content": text} if text else {}
        else:
            choice["text"] = text
        if logprobs is not None:
            choice["logprobs"] = logprobs
        return self._chunk_of(choice)

    def role_chunk(self, index: int = 0) -> dict:
        """A chat stream's first chunk, before its first token's: the role alone, as vLLM sends it."""
        return self._chunk_of({"index": index, "delta": {"role": "assistant", "content": ""},
                               "finish_reason": None})

    def closing_chunk(self, text: str, index: int = 0) -> dict:
        """The finish of a stream that ended before max_tokens, with whatever text was still held back."""
        choice: dict = {"index": index, "finish_reason": "length"}
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

    def choice(self, token_ids: list[int], text: str, index: int = 0, stop_reason: str | int | None = None,
               logprobs: dict | None = None) -> dict:
        """One answer of a request that did not stream (`stop_reason` set: cut by a stop)."""
        choice: dict = {"index": index, "finish_reason": "length" if stop_reason is None else "stop"}
        if stop_reason is not None:
            choice["stop_reason"] = stop_reason
        if self.parsed.chat:
            choice["message"] = {"role": "assistant", "content": text}
            if logprobs is not None:
                choice["logprobs"] = logprobs
        else:
            choice.update(text=text, logprobs=logprobs)
        if self.parsed.return_token_ids:
            choice["token_ids"] = token_ids
        return choice

    def whole(self, token_ids: list[int], text: str, stop_reason: str | int | None = None) -> dict:
        """The response of a request that did not stream."""
        return self.whole_of([self.choice(token_ids, text, 0, stop_reason)], len(self.parsed.prompt_ids),
                             len(token_ids))

    def whole_of(self, choices: list[dict], prompt_tokens: int, completion_tokens: int) -> dict:
        """The response holding `choices` (n per prompt of a list), with the usage of them all."""
        return {"id": self.id, "object": "chat.completion" if self.parsed.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    # -- log-probabilities -----------------------------------------------------------------------------

    def token_str(self, token_id: int) -> str:
        """A token's own text (its bytes as UTF-8; a partial character is U+FFFD), as a logprob names it."""
        return self.tokens.token_bytes(token_id).decode("utf-8", "replace")

    def logprobs(self, entries: list, offset: int = 0) -> dict | None:
        """The log-probabilities of a choice's `entries` (`TokenLogprobs`: chosen id, logprob, top (id, logprob)),
        None when the request did not ask. Completions: `tokens`, `token_logprobs`, `top_logprobs` (the top
        tokens and the chosen one, as vLLM's: logprobs + 1 entries where the chosen is not among the top) and
        `text_offset` (from `offset`, the characters of the tokens before); chat: `content`, an entry a token
        with its `top_logprobs` most likely, most likely first."""
        if self.parsed.logprobs is None:
            return None
        if self.parsed.chat:
            return {"content": [{**self._chat_token(e.token_id, e.logprob),
                                 "top_logprobs": [self._chat_token(t, lp) for t, lp in e.top]} for e in entries],
                    "refusal": None}
        tokens = [self.token_str(e.token_id) for e in entries]
        offsets = []
        for token in tokens:
            offsets.append(offset)
            offset += len(token)
        top = []
        for e, token in zip(entries, tokens):
            named = {self.token_str(t): lp for t, lp in e.top}
            named.setdefault(token, e.logprob)
            top.append(named)
        return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries], "top_logprobs": top,
                "text_offset": offsets}

    def _chat_token(self, token_id: int, logprob: float) -> dict:
        raw = self.tokens.token_bytes(token_id)
        return {"token": raw.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(raw)}
