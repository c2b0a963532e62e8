"""What the sim charges for moving KV data and for a prefill after a cached prefix."""
import dataclasses

import pytest

from engines.sim.build import build_cost_model
from engines.sim.cost_model import CostModel
from engines.sim.transfer import TransferModel
from engines.specs.presets import load_hardware, load_model


def test_copy_time_is_read_and_write_of_the_kv_bytes_at_the_device_bandwidth():
    model, hw = load_model("opt-13b"), load_hardware("a100-40gb")
    t = TransferModel(model, hw, 16)
    assert t.copy_time(1000) == pytest.approx(2 * 1000 * model.kv_bytes_per_token / hw.effective_bandwidth)
    assert t.copy_time(0) == 0


def test_swap_time_is_a_fixed_cost_per_block_layer_k_and_v_plus_bytes_over_the_link():
    model, hw = load_model("opt-13b"), load_hardware("a100-40gb")
    for bs in (1, 16, 256):
        per_block = 2 * model.num_layers * hw.host_transfer_latency_s + \
            bs * model.kv_bytes_per_token / hw.host_link_bandwidth
        assert TransferModel(model, hw, bs).swap_time(3) == pytest.approx(3 * per_block)


def test_a_preset_without_a_host_link_refuses_to_time_a_swap():
    model = load_model("opt-13b")
    hw = dataclasses.replace(load_hardware("a100-40gb"), host_link_bandwidth=0.0)
    t = TransferModel(model, hw, 16)
    assert t.swap_time(0) == 0
    with pytest.raises(ValueError, match="host_link_bandwidth"):
        t.swap_time(1)


@pytest.mark.parametrize("preset", ["a100-40gb", "cpu-tiny"])
def test_a_cached_prefix_makes_a_prefill_cheaper_than_computing_it_and_dearer_than_skipping_it(preset):
    model = load_model("opt-13b" if preset == "a100-40gb" else "tiny")
    cost = build_cost_model(model, load_hardware(preset), 16)
    whole = cost.iteration_time([400], [])
    rest = cost.iteration_time([60], [], [340])
    alone = cost.iteration_time([60], [])
    assert alone <= rest < whole
    assert cost.iteration_time([60], [], [0]) == pytest.approx(alone)


def test_the_roofline_breakdown_adds_up_with_a_cached_prefix():
    cost = CostModel(load_model("llama-13b"), load_hardware("a100-40gb"), 16)
    parts = cost.breakdown([30, 50], [100, 200], [80, 341])
    assert sum(parts.values()) == pytest.approx(cost.iteration_time([30, 50], [100, 200], [80, 341]))
