"""Server-sent events of an OpenAI-compatible streaming response, and what one chunk carries.

A streaming completion is a run of events, each a `data: {...}` line (one
JSON chunk) closed by a blank line, and ends with `data: [DONE]`.
`aread_data` yields each event's data as it completes, from a body's byte
chunks as they arrive (the caller stamps the time; `read_data` from lines); `parse_chunk` says
what one chunk holds: a token (a completion's `text`, a chat delta's
`content`, or `token_ids`, which our own server and vLLM send with
`return_token_ids`; see `_has_output`), the `usage` counts (the last chunk,
with `stream_options.include_usage`), or an error event.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
import json

DONE = "[DONE]"
ERROR_CHARS = 200          # an error line keeps this many characters of what the server said


@dataclass(slots=True)
class Chunk:
    """One parsed `data:` event."""

    carries_output: bool            # a generated token (or some text) came with it
    usage: dict | None = None       # {"prompt_tokens", "completion_tokens", ...} when present
    error: str | None = None        # an error event's message, one line
    finished: bool = False          # a choice named its finish_reason (the request is complete)


def one_line(text: str | bytes, limit: int = ERROR_CHARS) -> str:
    """`text` squeezed to one line of at most `limit` characters (for an error message)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class EventReader:
    """The data of each event of a response body fed one line at a time, as soon as the event is complete.

    Follows the SSE rules the servers use: `data:` lines (one space after the
    colon dropped) join with newlines, a blank line ends the event, comment
    lines (`:`) and other fields (`event:`, `id:`, `retry:`) are skipped. An
    event the stream ended in the middle of is still given by `end()`.
    """

    def __init__(self) -> None:
        self._data: list[str] = []

    def line(self, raw: bytes) -> str | None:
        """Feed one raw line; the event it completes, if any."""
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if self._data:
                event, self._data = "\n".join(self._data), []
                return event
            return None
        if line.startswith(":"):
            return None
        key, _, value = line.partition(":")
        if key == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def end(self) -> str | None:
        """The event left unfinished when the body ended, if any."""
        event, self._data = ("\n".join(self._data) if self._data else None), []
        return event


class ChunkSplitter:
    """A body's bytes, in pieces of any size, as the data of each complete event (`EventReader` per line)."""

    def __init__(self) -> None:
        self._reader, self._pending = EventReader(), b""

    def feed(self, data: bytes) -> list[str]:
        *lines, self._pending = (self._pending + data).split(b"\n")
        events = (self._reader.line(line + b"\n") for line in lines)
        return [event for event in events if event is not None]

    def close(self) -> list[str]:
        """At the body's end: a last line without its newline, and an event left unfinished."""
        last = [self._reader.line(self._pending)] if self._pending else []
        self._pending = b""
        return [event for event in (*last, self._reader.end()) if event is not None]


def read_data(lines: Iterable[bytes]) -> Iterator[str]:
    """The data of each event in `lines` (the response body's raw lines, or any pieces of it)."""
    splitter = ChunkSplitter()
    for raw in lines:
        yield from splitter.feed(raw)
    yield from splitter.close()


async def aread_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """`read_data` over a body that arrives as byte chunks (an async HTTP client's stream)."""
    splitter = ChunkSplitter()
    async for data in chunks:
        for event in splitter.feed(data):
            yield event
    for event in splitter.close():
        yield event


def parse_chunk(data: str) -> Chunk:
    """What one event's JSON says; raises ValueError when it is not a JSON object."""
    try:
        event = json.loads(data)
    except json.JSONDecodeError as err:
        raise ValueError(f"bad event from the server ({err.msg}): {one_line(data, 80)}") from None
    if not isinstance(event, dict):
        raise ValueError(f"bad event from the server (not an object): {one_line(data, 80)}")
    if "error" in event or event.get("object") == "error":
        return Chunk(carries_output=False, error=_error_message(event))
    choices = event.get("choices") or []
    output = any(_has_output(c) for c in choices if isinstance(c, dict))
    usage = event.get("usage")
    finished = any(c.get("finish_reason") for c in choices if isinstance(c, dict))
    return Chunk(carries_output=output, usage=usage if isinstance(usage, dict) else None, finished=finished)


def _has_output(choice: dict) -> bool:
    """Whether a choice brings a token: its `token_ids`, or text (a completion's `text`, a chat delta's
    `content` or reasoning). Empty text counts too, as a token whose characters are held back (part of a
    UTF-8 character, as our server sends them), except on a chat's role announcement and on a closing
    choice that only names the finish_reason."""
    delta = choice.get("delta")
    holder = delta if isinstance(delta, dict) else choice
    if holder.get("token_ids") or choice.get("token_ids"):
        return True
    texts = [holder.get(k) for k in ("text", "content", "reasoning_content", "reasoning")]
    if any(isinstance(t, str) and t for t in texts):
        return True
    if not any(isinstance(t, str) for t in texts):
        return False
    return "role" not in holder and choice.get("finish_reason") is None

def _error_message(event: dict) -> str:
    """vLLM: {"error": {"message", "type", "code"}}; others: {"error": "..."} or {"object": "error", "message"}."""
    error = event.get("error", event)
    if isinstance(error, dict):
        message = error.get("message") or json.dumps(error)
        code = error.get("code") or error.get("type")
        return one_line(f"{code}: {message}" if code else str(message))
    return one_line(str(error))
