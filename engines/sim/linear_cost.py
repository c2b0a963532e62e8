"""The fitted cost model: iteration time as a sum of linear terms measured on the real backend.

    t = overhead + prefill_iteration * (1 if the batch holds a prefill else 0)
        + per_row * rows + per_token * tokens + prefill_pair * sum(L * (L + 1))
        + contiguous_ctx * context tokens                        (contiguous layout)
        + paged_ctx * context tokens + paged_block * blocks read (paged layout, by block size)

The coefficients come from a hardware preset's `fitted` block, written by
`python -m pagedbench.studies.fit` from a profile of one model on one device; they
hold for that model only, so another model is refused. Like the roofline it
sees only the batch's shape and the KV layout, the same for every engine.
A preset fitted before a term existed loads with that term at 0 (OPTIONAL_TERMS).

`scheduler_s` (optional, 0 by default) is the host's time between two
iterations on the real backend (scheduling, bookkeeping, recording), which
the profile of `execute` alone does not see; `python -m pagedbench.studies.replay`
measures it on its real runs, the same for every engine. The sim's executor
advances its clock by it before each iteration.
"""
from __future__ import annotations

from collections.abc import Sequence

from pagedbench.engines.sim.cost_model import blocks_read
from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.model import ModelSpec

TERMS = ("overhead_s", "per_row_s", "per_token_s", "prefill_pair_s", "contiguous_ctx_s", "paged_ctx_s",
         "paged_block_s")
# Terms added since the first fitted presets, with the value an older preset (which lacks them) implies.
OPTIONAL_TERMS = {"prefill_iteration_s": 0.0}


class LinearCostModel:
    __slots__ = ("model", "hw", "block_size", "c", "scheduler_s")

    def __init__(self, model: ModelSpec, hw: HardwareSpec, block_size: int | None = None):
        fitted = hw.fitted or {}
        missing = [t for t in TERMS if t not in fitted]
        if missing:
            raise ValueError(f"hardware preset {hw.name!r}: fitted block lacks {missing}")
        c = {t: fitted[t] for t in TERMS} | {t: fitted.get(t, default) for t, default in OPTIONAL_TERMS.items()}
        bad = [t for t, v in c.items() if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0]
        if bad:
            raise ValueError(f"hardware preset {hw.name!r}: fitted terms must be numbers >= 0: {bad}")
        if fitted.get("model") not in (None, model.name):
            raise ValueError(f"hardware preset {hw.name!r} was fitted for model {fitted['model']!r}, not "
                             f"{model.name!r}: profile and fit that model (python -m pagedbench.studies.profile, "
                             f"python -m pagedbench.studies.fit)")
        scheduler_s = fitted.get("scheduler_s", 0.0)
        if isinstance(scheduler_s, bool) or not isinstance(scheduler_s, (int, float)) or scheduler_s < 0:
            raise ValueError(f"hardware preset {hw.name!r}: fitted scheduler_s must be a number >= 0")
        self.model, self.hw, self.block_size = model, hw, block_size
        self.c = {t: float(v) for t, v in c.items()}
        self.scheduler_s = float(scheduler_s)

    def iteration_time(self, prefill_lens: Sequence[int], decode_context_lens: Sequence[int],
                       prefill_cached: Sequence[int] = ()) -> float:
        rows = len(prefill_lens) + len(decode_context_lens)
        if rows == 0:
            raise ValueError("iteration_time of an empty batch: an idle engine should advance "
                             "its clock to the next arrival instead")
        return sum(self.breakdown(prefill_lens, decode_context_lens, prefill_cached).values())

    def breakdown(self, prefill_lens: Sequence[int], decode_context_lens: Sequence[int],
                  prefill_cached: Sequence[int] = ()) -> dict[str, float]:
        """Prefill after cached tokens C (a shared prefix): its L new tokens add L * C pairs, counted as
        2 * L * C in the pair term's units (L * (L + 1) is twice the causal pairs)."""
        c = self.c
        pairs = sum(n * (n + 1) for n in prefill_lens)
        if prefill_cached:
            pairs += sum(2 * n * k for n, k in zip(prefill_lens, prefill_cached))
        tokens = sum(prefill_lens) + len(decode_context_lens)
        ctx = sum(decode_context_lens)
        if self.block_size:
            decode = c["paged_ctx_s"] * ctx + c["paged_block_s"] * blocks_read(decode_context_lens, self.block_size)
        else:
            decode = c["contiguous_ctx_s"] * ctx
        return {
            "overhead": c["overhead_s"],
            "prefill_iteration": c["prefill_iteration_s"] if len(prefill_lens) else 0.0,
            "rows": c["per_row_s"] * (len(prefill_lens) + len(decode_context_lens)),
            "tokens": c["per_token_s"] * tokens,
            "attention_prefill": c["prefill_pair_s"] * pairs,
            "attention_decode": decode,
        }

    def decode_time(self, rows: int, context: int, blocks: int) -> float:
        """iteration_time of a decode-only batch of `rows` rows whose contexts sum to `context` tokens and span
        `blocks` blocks: breakdown's terms for it, summed in the same order (tests/engines/test_fast_forward.py
        holds the two paths' tables equal to the bit)."""
        if rows == 0:
            raise ValueError("decode_time of an empty batch")
        c = self.c
        if self.block_size:
            decode = c["paged_ctx_s"] * context + c["paged_block_s"] * blocks
        else:
            decode = c["contiguous_ctx_s"] * context
        return sum((c["overhead_s"], 0.0, c["per_row_s"] * rows, c["per_token_s"] * rows, c["prefill_pair_s"] * 0,
                    decode))

    def describe(self) -> str:
        return (f"fitted cost model: {self.model.name} on {self.hw.name} "
                f"({(self.hw.fitted or {}).get('source', {}).get('profile', 'no profile named')})")
