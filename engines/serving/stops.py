"""Where a response's output stops before max_tokens: a stop string in its text or a stop token id.

`Stopper` turns a request's tokens into the text that may be sent, one token at a time. A stop token id ends
the output without its text; a stop string ends it just before the string (neither is sent, as vLLM sends
them by default). While the text ends with what could begin a stop string, those characters are held back:
a stream never sends text that a later token shows to be part of a stop string. `reason` is what stopped it
(the string or the token id; None while it runs or when it ran to max_tokens).
"""
from __future__ import annotations


class Stopper:
    def __init__(self, decoder, stops: tuple[str, ...] = (), stop_token_ids: tuple[int, ...] = ()):
        self.pieces, self.stops, self.stop_ids = decoder, stops, set(stop_token_ids)
        self.text, self.sent = "", 0
        self.reason: str | int | None = None

    @property
    def stopped(self) -> bool:
        return self.reason is not None

    def add(self, token_id: int, final: bool = False) -> str:
        """The text this token lets out (all that is held back when it is `final` or stops the output)."""
        if token_id in self.stop_ids:
            self.reason = token_id
            return self._out(len(self.text))
        self.text += self.pieces.add(token_id, final)
        if final:
            self.text += self.pieces.flush()
        hits = [(at, s) for s in self.stops if (at := self.text.find(s)) >= 0]
        if hits:
            at, self.reason = min(hits)
            return self._out(at)
        if final or not self.stops:
            return self._out(len(self.text))
        held = max((n for s in self.stops for n in range(len(s) - 1, 0, -1) if self.text.endswith(s[:n])),
                   default=0)
        return self._out(len(self.text) - held)

    def flush(self) -> str:
        """At a finish that came without a final token: the rest (a stopped output has none)."""
        if self.stopped:
            return ""
        self.text += self.pieces.flush()
        return self._out(len(self.text))

    def _out(self, end: int) -> str:
        end = max(end, self.sent)
        out, self.sent = self.text[self.sent:end], end
        return out

    @property
    def output(self) -> str:
        """The text sent so far (the whole output, once it has finished)."""
        return self.text[:self.sent]
