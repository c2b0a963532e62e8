"""The sim executor's clock: an iteration's forward pass, its device copies and its swaps, as the
transfer model times them (overlapped or serial, as the hardware preset says)."""
import pytest

from pagedbench.engines.batch import Batch
from pagedbench.engines.sim.executor import SimExecutor
from tests.engines.test_transfer_cost import round_transfers


class FixedCost:
    """Every forward pass takes 15 ms; no host time between iterations."""
    scheduler_s = 0.0

    def iteration_time(self, prefill_lens, decode_context_lens, prefill_cached=None):
        return 15e-3


def blocks(n: int) -> list[tuple[int, int]]:
    return [(i, 100 + i) for i in range(n)]


@pytest.mark.parametrize("overlap, expected_ms", [
    # compute stream: 15 ms forward + 5 copied token slots at 1 ms = 20 ms; swap-outs: 10 blocks at 8 ms = 80 ms.
    (True, 85),     # transfer-bound: 80 ms of swaps, then the last of 4 layers' compute, 20 / 4
    (False, 100),   # one after the other: 20 + 80
])
def test_the_executor_charges_an_iterations_swaps_as_the_transfer_model_overlaps_them(overlap, expected_ms):
    executor = SimExecutor(FixedCost(), round_transfers(overlap))
    batch = Batch(decode_context_lens=[64, 64], copy_tokens=5, swap_out=blocks(10))
    duration = executor.execute(batch)
    assert duration == pytest.approx(expected_ms * 1e-3)
    assert executor.now() == pytest.approx(expected_ms * 1e-3)


@pytest.mark.parametrize("overlap, expected_ms", [
    (True, 17),     # compute-bound: 15 ms forward hides 1 block's 8 ms of swap-ins, but for layer 0's 2 ms
    (False, 23),
])
def test_a_swap_in_under_a_longer_forward_pass_costs_only_its_first_layer_with_overlap(overlap, expected_ms):
    executor = SimExecutor(FixedCost(), round_transfers(overlap))
    assert executor.execute(Batch(decode_context_lens=[64], swap_in=blocks(1))) == pytest.approx(expected_ms * 1e-3)


@pytest.mark.parametrize("overlap", [True, False])
def test_device_copies_add_to_the_forward_pass_either_way(overlap):
    executor = SimExecutor(FixedCost(), round_transfers(overlap))
    assert executor.execute(Batch(decode_context_lens=[64], copy_tokens=3)) == pytest.approx(18e-3)
