"""What the sim charges for moving KV data (and how swaps overlap the forward pass) and for a prefill after a
cached prefix."""
import dataclasses

import pytest

from pagedbench.engines.sim.build import build_cost_model
from pagedbench.engines.sim.cost_model import CostModel
from pagedbench.engines.sim.transfer import TransferModel
from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.presets import load_hardware, load_model


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


def test_with_tensor_parallelism_each_device_moves_its_share():
    model, hw = load_model("opt-66b"), load_hardware("a100-40gb")   # tp = 4
    assert model.tp == 4
    share = model.kv_bytes_per_token / 4
    t = TransferModel(model, hw, 16)
    assert t.copy_time(1000) == pytest.approx(2 * 1000 * share / hw.effective_bandwidth)
    per_block = 2 * model.num_layers * hw.host_transfer_latency_s + 16 * share / hw.host_link_bandwidth
    assert t.swap_time(2) == pytest.approx(2 * per_block)


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


# The overlap model on round numbers: the tiny model (4 layers, 4,096 KV bytes per token), blocks of 16 tokens.
# A block is 2 * 4 = 8 transfers of 0.5 ms plus 16 * 4,096 bytes at 16.384 MB/s = 4 ms: 8 ms, 2 ms per layer.
# A device copy of one token slot reads and writes 4,096 bytes at 8.192 MB/s: 1 ms.
def round_hardware(overlap: bool) -> HardwareSpec:
    return HardwareSpec(name="round", memory_bytes=1 << 30, peak_flops=1e12, memory_bandwidth=8.192e6,
                        flops_efficiency=1.0, bandwidth_efficiency=1.0, interconnect_bandwidth=1e9,
                        iteration_overhead_s=0.0, host_link_bandwidth=16.384e6, host_transfer_latency_s=0.5e-3,
                        host_transfer_overlap=overlap)


def round_transfers(overlap: bool) -> TransferModel:
    return TransferModel(load_model("tiny"), round_hardware(overlap), 16)


def test_the_round_numbers_are_what_the_overlap_tests_assume():
    t = round_transfers(True)
    assert t.model.num_layers == 4
    assert t.swap_time(1) == pytest.approx(8e-3)
    assert t.copy_time(1) == pytest.approx(1e-3)


@pytest.mark.parametrize("compute_ms, blocks_out, blocks_in, overlapped_ms, serial_ms", [
    # compute-bound: 16 ms of swap-ins hide behind 100 ms of compute, but for layer 0's 4 ms: 100 + 4
    (100, 0, 2, 104, 116),
    (100, 2, 0, 104, 116),
    # transfer-bound: 80 ms of swap-outs, then the last layer's 20 / 4 ms of compute: 80 + 5
    (20, 10, 0, 85, 100),
    (20, 0, 10, 85, 100),
    # both ways: the 16 ms of swap-ins come first (the stream is in order and the layers wait for the
    # swap-outs' events), then as above: 16 + max(20 + 20, 80 + 5)
    (20, 10, 2, 101, 116),
    # 80 ms of swap-ins, then 16 ms of swap-outs under 100 ms of compute: 80 + max(100 + 4, 16 + 25)
    (100, 2, 10, 184, 196),
    # no swap: the compute stream alone
    (37, 0, 0, 37, 37),
])
def test_an_iterations_swaps_overlap_its_compute_layer_by_layer_or_add_to_it(compute_ms, blocks_out, blocks_in,
                                                                            overlapped_ms, serial_ms):
    overlapped = round_transfers(True).iteration_time(compute_ms * 1e-3, blocks_out, blocks_in)
    serial = round_transfers(False).iteration_time(compute_ms * 1e-3, blocks_out, blocks_in)
    assert overlapped == pytest.approx(overlapped_ms * 1e-3)
    assert serial == pytest.approx(serial_ms * 1e-3)


@pytest.mark.parametrize("compute_ms", [0.5, 5, 20, 40, 80, 500])
@pytest.mark.parametrize("blocks", [1, 10, 100])
def test_overlapping_costs_at_least_the_longer_stream_and_at_most_both(compute_ms, blocks):
    t = round_transfers(True)
    compute, swaps = compute_ms * 1e-3, t.swap_time(blocks)
    assert max(compute, swaps) < t.iteration_time(compute, blocks, 0) < compute + swaps


@pytest.mark.parametrize("bs", [1, 16, 256])
def test_without_overlap_an_iteration_is_its_compute_plus_both_swaps_as_before(bs):
    model = load_model("opt-13b")
    hw = dataclasses.replace(load_hardware("a100-40gb"), host_transfer_overlap=False)
    t = TransferModel(model, hw, bs)
    per_block = 2 * model.num_layers * hw.host_transfer_latency_s + \
        bs * model.kv_bytes_per_token / hw.host_link_bandwidth
    assert t.iteration_time(0.05, 3, 5) == pytest.approx(0.05 + 8 * per_block)
    assert t.iteration_time(0.05, 0, 0) == 0.05


def test_gpu_presets_overlap_swaps_with_the_forward_pass_and_cpu_presets_do_not():
    for name in ("a100-40gb", "a100-80gb", "h100-80gb", "h200"):
        assert load_hardware(name).host_transfer_overlap is True
    for name in ("cpu", "cpu-tiny"):
        assert load_hardware(name).host_transfer_overlap is False
    with pytest.raises(ValueError, match="host_transfer_overlap"):
        dataclasses.replace(load_hardware("cpu"), host_transfer_overlap="yes")
