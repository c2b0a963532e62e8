"""The API keys of the server and the check of a request's `Authorization` header, as vLLM's server does it.

Keys come from `serve.api_key` (one key or a list) and from the environment variable VLLM_API_KEY (one more,
as vLLM reads it). A request is let in when its header is `Bearer KEY` for one of them: the scheme in any case
("bearer" too, RFC 7235 makes it case-insensitive), the key exactly (case, length and every character). The key
is compared by its SHA-256 digest with `secrets.compare_digest` against every key, so the time taken says
nothing about how much of a wrong key matched, nor which key was close.
"""
from __future__ import annotations

from collections.abc import Iterable
import hashlib
import os
import secrets

ENV = "VLLM_API_KEY"


def api_keys(configured: str | Iterable[str] | None, environ: dict | None = None) -> tuple[str, ...]:
    """The keys a request may present: the configured ones, then $VLLM_API_KEY; () when none (no check)."""
    keys = [configured] if isinstance(configured, str) else list(configured or ())
    env = (os.environ if environ is None else environ).get(ENV)
    if env:
        keys.append(env)
    for key in keys:
        if not isinstance(key, str) or not key:
            raise ValueError(f"an API key must be a non-empty string, got {key!r}")
    return tuple(dict.fromkeys(keys))


class KeyCheck:
    """Whether an `Authorization` header holds one of `keys` (an empty tuple: every request is let in)."""

    def __init__(self, keys: tuple[str, ...]):
        self.digests = [hashlib.sha256(key.encode()).digest() for key in keys]

    @property
    def enabled(self) -> bool:
        return bool(self.digests)

    def allows(self, header: str | None) -> bool:
        if not self.digests:
            return True
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.encode()).digest()
        found = False
        for key in self.digests:   # every key compared: no early exit
            found |= secrets.compare_digest(digest, key)
        return found
