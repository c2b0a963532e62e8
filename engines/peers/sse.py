"""Server-sent events of an OpenAI-compatible streaming response, and what one chunk carries.

A streaming completion is a run of events, each a `data: {...}` line (one
JSON chunk) closed by a blank line, and ends with `data: [DONE]`.
`response_lines` splits a response body into lines as they arrive,
`read_data` yields each event's data as it completes (the caller stamps the
time); `parse_chunk` says what one chunk holds: a token (a completion's
`text`, a chat delta's `content`, or `token_ids`, which our own server and
vLLM send with `return_token_ids`; see `_has_output`), the `usage` counts (the last chunk, with
`stream_options.include_usage`), or an error event.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
import http.client
import json

DONE = "[DONE]"
READ_BYTES = 65536
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


def response_lines(response: http.client.HTTPResponse) -> Iterator[bytes]:
    """The body's lines as their bytes arrive. Reads with `read1`, not `readline`: on a chunked body cut
    short (the server died) `readline` returns a quiet end of file, `read1` raises IncompleteRead."""
    pending = b""
    while data := response.read1(READ_BYTES):
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            yield line + b"\n"
    if pending:
        yield pending


def read_data(lines: Iterable[bytes]) -> Iterator[str]:
    """The data of each event in `lines` (raw lines of the response body), as soon as the event is complete.

    Follows the SSE rules the servers use: `data:` lines (one space after the
    colon dropped) join with newlines, a blank line ends the event, comment
    lines (`:`) and other fields (`event:`, `id:`, `retry:`) are skipped. An
    event the stream ended in the middle of is still yielded.
    """
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        if key == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


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
