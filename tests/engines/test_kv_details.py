"""Exact edge behaviour of the KV helpers: the power-of-two rounding and the checks on a holding."""
from __future__ import annotations

import pytest

from pagedbench.engines.kv.buddy import next_pow2
from pagedbench.engines.kv.memory_split import Holding, MemorySplit, split_memory


@pytest.mark.parametrize("n, expected", [(-3, 1), (0, 1), (1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (17, 32)])
def test_next_pow2_is_the_smallest_power_of_two_at_least_n_and_at_least_1(n, expected):
    assert next_pow2(n) == expected


def test_a_holding_requesting_more_than_it_took_is_refused_even_when_the_sums_agree():
    # Alone, the first holding has requested 4 > taken 2; the second's 4 spare taken slots hide it in the sums.
    holdings = [Holding(stored=1, final=4, requested=4, taken=2), Holding(stored=1, final=4, requested=4, taken=8)]
    with pytest.raises(ValueError, match="inconsistent holding"):
        split_memory(20, holdings, 5, 0)


def test_a_holding_storing_more_than_it_requested_is_refused_even_when_the_sums_agree():
    # Alone, the first holding stores 5 > requested 4; the second's unfilled slots hide it in the sums.
    holdings = [Holding(stored=5, final=8, requested=4, taken=4), Holding(stored=0, final=8, requested=8, taken=8)]
    with pytest.raises(ValueError, match="inconsistent holding"):
        split_memory(20, holdings, 5, 0)


def test_consistent_holdings_split_by_hand():
    holdings = [Holding(stored=1, final=4, requested=4, taken=4), Holding(stored=2, final=3, requested=4, taken=8)]
    # tokens 3; reservation (4 - 1) + (3 - 2) = 4; internal 0 + 1; rounding 4 + unmanaged 20 - 12 - 5 = 3.
    assert split_memory(20, holdings, 5, 1) == MemorySplit(3, 4, 1, 4 + 3 + 1, 4)
