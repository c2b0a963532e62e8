"""How many contiguous KV slots an Orca-style engine reserves for a request when admitting it."""
from __future__ import annotations

from enum import Enum

from pagedbench.engines.kv.buddy import next_pow2


class Reservation(str, Enum):
    MAX = "max"        # the model's maximum sequence length
    POW2 = "pow2"      # prompt + the next power of two >= the true output length (at most 2x over)
    ORACLE = "oracle"  # prompt + the true output length (an unreachable upper bound)

    def slots(self, prompt_len: int, output_len: int, max_seq_len: int) -> int:
        if self is Reservation.MAX:
            return max_seq_len
        if self is Reservation.POW2:
            return min(prompt_len + next_pow2(output_len), max_seq_len)
        return prompt_len + output_len
