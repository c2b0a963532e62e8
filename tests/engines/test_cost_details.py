"""Details of the sim's cost models worked out by hand: the roofline's OPT coefficients under tensor
parallelism, the fitted model on a batch of as many prefill as decode rows, and what `describe` prints."""
import dataclasses

import pytest

from pagedbench.engines.sim.cost_model import CostModel
from tests.engines.test_cost_coefficients import OPT, UNIT
from tests.engines.test_linear_cost import fitted_model


def test_opt_coefficients_over_two_devices_by_hand():
    """The toy OPT of test_cost_coefficients (2 layers, h 4, ffn 8, vocab 16, 2 bytes) on 2 devices of 1 FLOP/s
    and 1 byte/s: the ReLU's traffic, like every sharded term, divides by tp; the norms, residuals, embedding
    (token + position rows) and final norm are full width on every device."""
    cm = CostModel(dataclasses.replace(OPT, tp=2), UNIT)
    # Element-wise per layer 10h + ReLU 2 ffn / 2 = 40 + 8 = 48; embedding 3h = 12, final norm 2h = 8.
    assert cm._elementwise_s == pytest.approx((2 * 48 + 12 + 8) * 2)
    # Linear params 156 / 2 = 78 per device; GEMM I/O 4h + (12 + 4 + 8 + 8) / 2 = 32 per token.
    assert cm._linear_weight_s == pytest.approx(2 * 78 * 2)
    assert cm._linear_io_s == pytest.approx(2 * 32 * 2)
    # Ring all-reduce of 2 (tp - 1) / tp = 1 times h, twice a layer and once more; half the logits gathered.
    assert cm._all_reduce_s == pytest.approx(5 * 1 * 4 * 2)
    assert cm._gather_s == pytest.approx(0.5 * 16 * 2)


def test_the_fitted_model_times_a_batch_of_one_prefill_and_one_decode_row():
    """One prefill of 5 tokens and one decode row of context 7 (coefficients of test_linear_cost: distinct
    powers of ten): overhead 1e-1, a prefill 1e-4, 2 rows x 1e-2, 6 tokens x 1e-3, 5 x 6 = 30 pair units
    x 1e-5, 7 context tokens x 1e-6."""
    by_hand = 1e-1 + 1e-4 + 2e-2 + 6e-3 + 30e-5 + 7e-6
    assert fitted_model().iteration_time([5], [7]) == pytest.approx(by_hand, rel=1e-12)
    with pytest.raises(ValueError, match="empty batch"):
        fitted_model().iteration_time([], [])


def test_describe_states_the_effective_rates_in_tflops_and_gbs():
    hw = dataclasses.replace(UNIT, name="dev", peak_flops=400e12, flops_efficiency=0.78,
                             memory_bandwidth=2.0e12, bandwidth_efficiency=0.9)
    text = CostModel(OPT, hw).describe()
    assert text.startswith("sim cost model: toy-opt on 1x dev: 312.0 TFLOP/s and 1800 GB/s effective per device")
    # One decimal of TFLOP/s, rounded from the exact rate: a hair above 1.25 TFLOP/s shows as 1.3.
    edge = dataclasses.replace(UNIT, peak_flops=1.2500000000005e12)
    assert ": 1.3 TFLOP/s and" in CostModel(OPT, edge).describe()
