"""Prompt token ids against a model's vocabulary: refused with an error that names the request, or folded.

The packaged traces are tokenized with cl100k (ids up to 100,255) and the tiny model has 50,272 ids; vLLM
refuses such a request. Every place that feeds a trace's ids to a model (the real executor, the transformers
peer, the HTTP client when told the server's vocabulary) applies one of two explicit choices, named in the
run's config and summary: `error` stops before the request runs; `wrap` folds each id into the vocabulary
(id mod its size; throughput depends on lengths, not on what the tokens say) and the summary counts the
requests it folded.
"""
from __future__ import annotations

from collections.abc import Sequence

OUT_OF_VOCAB = ("error", "wrap")


def check_choice(choice: str, key: str) -> None:
    if choice not in OUT_OF_VOCAB:
        raise ValueError(f"{key}={choice!r} is not one of {list(OUT_OF_VOCAB)}")


def first_outside(ids: Sequence[int], vocab_size: int) -> int | None:
    """The position of the first id outside 0..vocab_size-1, or None."""
    return next((i for i, t in enumerate(ids) if not 0 <= t < vocab_size), None)


def fit_prompt(request_id: int, ids: Sequence[int], vocab_size: int, choice: str, key: str) -> list[int] | None:
    """None when every id is in the vocabulary; the folded ids under `wrap`; a ValueError under `error`
    (`key`: the config key that changes the choice, named in the message)."""
    bad = first_outside(ids, vocab_size)
    if bad is None:
        return None
    if choice == "error":
        raise ValueError(f"request {request_id}: prompt token {bad} is id {ids[bad]}, outside the model's vocabulary "
                         f"of {vocab_size} ids (0..{vocab_size - 1}); tokenize the trace with the model's tokenizer, "
                         f"or set {key}=wrap to fold ids into it (id mod {vocab_size}; the run's summary counts the "
                         f"requests folded)")
    return [t % vocab_size for t in ids]
