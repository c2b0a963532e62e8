"""One choice's output as its tokens arrive: its text (through a `Stopper`), its token ids and log-probabilities.

A request for n choices (or best_of samples) runs as one group of rows in the engine; each row's tokens reach
its own `ChoiceOutput`. A row that meets a stop ends there (its later tokens are dropped: the group runs on
for the others until every row has stopped or reached max_tokens). `best` keeps the n of best_of samples with
the highest summed log-probability, as vLLM's best_of ranks them.
"""
from __future__ import annotations

from pagedbench.engines.serving.stops import Stopper


class ChoiceOutput:
    def __init__(self, decoder, max_tokens: int, stops: tuple[str, ...] = (), stop_token_ids: tuple[int, ...] = ()):
        self.stopper = Stopper(decoder, stops, stop_token_ids)
        self.max_tokens = max_tokens
        self.seen = 0                   # tokens received (a stop token included)
        self.ids: list[int] = []        # the output's tokens (a stop token is not output)
        self.logprobs: list = []        # their `TokenLogprobs`, where the request computes them

    @property
    def stopped(self) -> bool:
        return self.stopper.stopped

    @property
    def reason(self) -> str | int | None:
        return self.stopper.reason

    @property
    def text(self) -> str:
        return self.stopper.output

    def add(self, token_id: int, logprob=None) -> str:
        """The text this token lets out (all that was held back when it is the last or meets a stop)."""
        self.seen += 1
        text = self.stopper.add(token_id, final=self.seen == self.max_tokens)
        if not (self.stopper.stopped and self.stopper.reason == token_id):
            self.ids.append(token_id)
            if logprob is not None:
                self.logprobs.append(logprob)
        return text

    def flush(self) -> str:
        """At the request's end: what was still held back."""
        return self.stopper.flush()

    @property
    def cumulative_logprob(self) -> float:
        return sum(e.logprob for e in self.logprobs)


def best(outputs: list[ChoiceOutput], n: int) -> list[ChoiceOutput]:
    """The n outputs with the highest summed log-probability, best first; all of them, in row order, when n
    is all there are (no ranking: n parallel samples answer in the order they were drawn)."""
    if n >= len(outputs):
        return outputs
    return sorted(outputs, key=lambda o: o.cumulative_logprob, reverse=True)[:n]
