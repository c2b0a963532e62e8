"""The typed config of the HTTP peer: which OpenAI-compatible server to replay a trace against, and how.

`url` is the server's root ("http://127.0.0.1:8000"); the client posts to
`{url}/v1/completions` or `{url}/v1/chat/completions` and lists models at
`{url}/v1/models`. Every field is checked here, once, so the client never
meets a config it cannot use.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
import json
from urllib.parse import urlsplit

from pagedbench.engines.specs.mapping import build_from_mapping

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
PROMPTS = ("tokens", "text")
# Body keys the client sets itself: a trace's prompt and length, and the streaming it reads.
CLIENT_KEYS = ("model", "prompt", "messages", "max_tokens", "stream", "n", "best_of")


@dataclass(slots=True)
class HttpBackendConfig:
    url: str                          # the server's root, e.g. "http://127.0.0.1:8000" (required)
    name: str = "http"
    endpoint: str = "completions"     # completions (/v1/completions) | chat (/v1/chat/completions)
    model: str | None = None          # None: the first id listed by GET {url}/v1/models
    prompt: str = "tokens"            # tokens: the trace's token ids as `prompt`; text: decoded with `tokenizer`
    tokenizer: str | None = None      # a load_tokenizer spec ("cl100k_base", "hf:/dir"); needed for text and chat
    ignore_eos: bool = True           # sends vLLM's `ignore_eos: true`; false for servers that reject unknown keys
    extra_body: dict = field(default_factory=dict)   # merged into every request body, last
    max_concurrency: int | None = None    # None: unbounded; else requests in flight at most, the rest wait
    api_key: str | None = None        # sent as `Authorization: Bearer KEY`
    headers: dict = field(default_factory=dict)   # more headers on every request (str: str)
    warmup_requests: int = 0          # sent (the trace's first request) before the clock starts, not counted
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0      # longest silence between two bytes of a response (headers included)
    temperature: float = 0.0
    vocab_size: int | None = None     # the served model's ids: a token prompt outside it is refused before sending
                                      # (not in conf/backend/http.yaml: +backend.vocab_size=N)

    def __post_init__(self) -> None:
        if self.vocab_size is not None and self.vocab_size < 1:
            raise ValueError(f"backend.vocab_size must be >= 1 or null, got {self.vocab_size}")
        if not isinstance(self.url, str) or not self.url:
            raise ValueError("backend.url is required: the server's root, e.g. http://127.0.0.1:8000")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"backend.url must start with http:// or https://, got {self.url!r}")
        if not parts.hostname:
            raise ValueError(f"backend.url has no host, got {self.url!r}")
        try:
            parts.port
        except ValueError:
            raise ValueError(f"backend.url has an invalid port, got {self.url!r}") from None
        if parts.query or parts.fragment:
            raise ValueError(f"backend.url must not carry a query or fragment, got {self.url!r}")
        if parts.path.rstrip("/").endswith("/v1"):
            raise ValueError(f"backend.url is the server's root, without /v1, got {self.url!r}")
        self.url = self.url.rstrip("/")
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"backend.endpoint must be one of {list(ENDPOINTS)}, got {self.endpoint!r}")
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ValueError(f"backend.model must be None or a non-empty string, got {self.model!r}")
        if self.prompt not in PROMPTS:
            raise ValueError(f"backend.prompt must be one of {list(PROMPTS)}, got {self.prompt!r}")
        if self.tokenizer is not None and (not isinstance(self.tokenizer, str) or not self.tokenizer):
            raise ValueError(f"backend.tokenizer must be None or a tokenizer spec, got {self.tokenizer!r}")
        if self.sends_text and self.tokenizer is None:
            raise ValueError("backend.tokenizer is needed to decode prompts to text (prompt: text, or endpoint: chat)")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"backend.ignore_eos must be true or false, got {self.ignore_eos!r}")
        self._check_extra_body()
        if self.max_concurrency is not None and (
                isinstance(self.max_concurrency, bool) or not isinstance(self.max_concurrency, int)
                or self.max_concurrency < 1):
            raise ValueError(f"backend.max_concurrency must be None or an integer >= 1, got {self.max_concurrency!r}")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key):
            raise ValueError("backend.api_key must be None or a non-empty string")
        if not isinstance(self.headers, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.headers.items()):
            raise ValueError(f"backend.headers must map header names to strings, got {self.headers!r}")
        self.headers = dict(self.headers)
        if isinstance(self.warmup_requests, bool) or not isinstance(self.warmup_requests, int) or \
                self.warmup_requests < 0:
            raise ValueError(f"backend.warmup_requests must be an integer >= 0, got {self.warmup_requests!r}")
        self.connect_timeout_s = _positive("connect_timeout_s", self.connect_timeout_s)
        self.read_timeout_s = _positive("read_timeout_s", self.read_timeout_s)
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise ValueError(f"backend.temperature must be a number >= 0, got {self.temperature!r}")
        self.temperature = float(self.temperature)

    def _check_extra_body(self) -> None:
        if not isinstance(self.extra_body, Mapping):
            raise ValueError(f"backend.extra_body must be a mapping, got {type(self.extra_body).__name__}")
        self.extra_body = dict(self.extra_body)
        taken = sorted(k for k in self.extra_body if k in CLIENT_KEYS)
        if taken:
            raise ValueError(f"backend.extra_body must not set {taken}: the client sets them from the trace "
                             f"and the config")
        try:
            json.dumps(self.extra_body)
        except (TypeError, ValueError) as err:
            raise ValueError(f"backend.extra_body must be plain JSON values: {err}") from None

    @property
    def sends_text(self) -> bool:
        """Prompts go out as text (decoded with `tokenizer`): chat always, completions with prompt: text."""
        return self.endpoint == "chat" or self.prompt == "text"

    @property
    def base_path(self) -> str:
        """The url's path, if the server sits under one (behind a proxy); "" for a server at the root."""
        return urlsplit(self.url).path.rstrip("/")

    @classmethod
    def from_dict(cls, d: dict) -> "HttpBackendConfig":
        return build_from_mapping(cls, d, "backend")


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"backend.{name} must be a number > 0, got {value!r}")
    return float(value)
