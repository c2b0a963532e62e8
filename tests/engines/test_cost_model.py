"""The simulated backend's roofline cost model."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedbench.engines.sim.cost_model import CostModel
from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.model import ModelSpec
from pagedbench.engines.specs.presets import load_hardware, load_model

TOY_MODEL = ModelSpec(name="toy", arch="opt", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4,
                      ffn_size=256, vocab_size=1000, max_seq_len=128)
TOY_HW = HardwareSpec(name="toy", memory_bytes=2**30, peak_flops=1e12, memory_bandwidth=1e10,
                      flops_efficiency=1.0, bandwidth_efficiency=1.0, interconnect_bandwidth=1e9,
                      iteration_overhead_s=1e-3)


def opt_13b() -> CostModel:
    return CostModel(load_model("opt-13b"), load_hardware("a100-40gb"))


def test_hand_computed_toy_decode():
    # Two decode sequences with contexts 10 and 30: T = 2 tokens, 2 rows, 40 context tokens.
    # 2 layers, hidden 64, 4 heads of 16, ffn 256, vocab 1000, fp16; 1 TFLOP/s, 10 GB/s.
    linear_params = (64 * 192 + 192) + (64 * 64 + 64) + (64 * 256 + 256) + (256 * 64 + 64)   # 49,728
    assert TOY_MODEL.linear_params_per_layer == linear_params
    # Memory-bound: weights + GEMM inputs/outputs (4 x 64 full width + 192 + 64 + 256 + 256).
    linear = max(2 * 2 * linear_params * 2 / 1e12, 2 * (linear_params * 2 + 2 * 1024 * 2) / 1e10)
    assert linear == pytest.approx(207_104 / 1e10)
    # Norms and residuals (10 x 64) and ReLU (2 x 256) per layer; embedding (3 x 64), final norm (2 x 64).
    elementwise = 2 * (2 * (640 + 512) + 192 + 128) * 2 / 1e10
    # 40 context tokens' K and V; Q, O and the new K, V of 2 tokens; per layer.
    attention = 2 * (40 * 2 * 64 * 2 + 2 * (2 * 64 + 2 * 64) * 2) / 1e10
    lm_head = (1000 * 64 * 2 + 2 * (64 + 1000) * 2) / 1e10
    expected = 1e-3 + linear + elementwise + attention + lm_head
    assert expected == pytest.approx(1.0372384e-3)
    assert CostModel(TOY_MODEL, TOY_HW).iteration_time([], [10, 30]) == pytest.approx(expected, rel=1e-12)


def test_hand_computed_toy_prefill_attention():
    # One 100-token prompt: 100 * 101 causal pairs x 2 x 64 FLOPs x 2 layers = 2.59 MFLOP
    # (2.6 us); Q, K, V, O and the K, V cache write: 2 x 100 x 384 x 2 bytes (7.7 us).
    terms = CostModel(TOY_MODEL, TOY_HW).breakdown([100], [])
    assert terms["attention_prefill"] == pytest.approx(max(2 * 64 * 100 * 101 * 2 / 1e12,
                                                           2 * 100 * 384 * 2 / 1e10))
    assert terms["attention_decode"] == 0.0


def test_hand_computed_opt_13b_decode_batch_1():
    # Batch-1 decode is the time to read the weights once: 40 layers x 314,618,880 linear
    # params x 2 bytes = 25.17 GB, plus the 50272 x 5120 LM head (0.51 GB), plus 500 context
    # tokens x 800 KiB of KV (0.41 GB), at 1555 GB/s x 0.8; plus the 3 ms overhead.
    bandwidth = 1555e9 * 0.8
    expected = 3e-3 + (40 * 314_618_880 * 2 + 50272 * 5120 * 2 + 500 * 819_200) / bandwidth
    assert opt_13b().iteration_time([], [500]) == pytest.approx(expected, rel=0.01)


def test_opt_13b_long_prefill_is_compute_bound():
    # 2048 prompt tokens: linear FLOPs 2 x 2048 x 12.58 G params at 312 TFLOP/s x 0.65.
    terms = opt_13b().breakdown([2048], [])
    assert terms["linear"] == pytest.approx(2 * 2048 * 40 * 314_618_880 / (312e12 * 0.65))


def test_decode_is_memory_bound_for_small_batches():
    cm = opt_13b()
    t1 = cm.iteration_time([], [500])
    t8 = cm.iteration_time([], [500] * 8)
    assert t1 < t8 < 1.15 * t1            # 8x the tokens for ~10% more time
    assert cm.weight_read_s / t1 > 0.8    # reading the weights is most of a batch-1 step
    assert cm.weight_read_s / t8 > 0.7
    assert cm.linear_ridge_tokens > 100   # GEMMs turn compute-bound only past ~170 tokens


def test_large_decode_batches_are_dominated_by_kv_reads():
    terms = opt_13b().breakdown([], [500] * 128)
    assert terms["attention_decode"] > terms["linear"]


def test_breakdown_sums_to_iteration_time():
    for model, hw in [("opt-13b", "a100-40gb"), ("opt-66b", "a100-40gb"), ("llama-13b", "h200"),
                      ("tiny", "cpu")]:
        cm = CostModel(load_model(model), load_hardware(hw))
        for batch in [([7], []), ([], [3]), ([300, 20, 1], [5, 900, 2048]), ([2048], list(range(1, 200)))]:
            assert sum(cm.breakdown(*batch).values()) == pytest.approx(cm.iteration_time(*batch), rel=1e-12)


def test_tensor_parallelism_adds_all_reduce_cost():
    model, hw = load_model("opt-66b"), load_hardware("a100-40gb")
    tp4, tp1 = CostModel(model, hw), CostModel(dataclasses.replace(model, tp=1), hw)
    batch = ([512], [1000] * 16)
    tokens, rows = 512 + 16, 17
    # 2 all-reduces per layer + 1 after the embedding, ring of 4; plus the logits gather.
    expected = ((2 * 64 + 1) * 2 * 3 / 4 * tokens * 9216 * 2 + 3 / 4 * rows * 50272 * 2) / 240e9
    assert tp4.breakdown(*batch)["communication"] == pytest.approx(expected)
    assert tp1.breakdown(*batch)["communication"] == 0.0
    # A slower link costs tp=4 time, and never touches tp=1.
    slow_hw = dataclasses.replace(hw, interconnect_bandwidth=hw.interconnect_bandwidth / 2)
    assert CostModel(model, slow_hw).iteration_time(*batch) > tp4.iteration_time(*batch)
    assert CostModel(dataclasses.replace(model, tp=1), slow_hw).iteration_time(*batch) \
        == tp1.iteration_time(*batch)
    # Sharding still pays off: 4 devices are faster than 1, but not 4x.
    assert tp1.iteration_time(*batch) / 4 < tp4.iteration_time(*batch) < tp1.iteration_time(*batch)


def test_empty_batch_raises():
    with pytest.raises(ValueError, match="empty batch"):
        opt_13b().iteration_time([], [])


def test_accepts_tuples_and_returns_a_float():
    cm = opt_13b()
    t = cm.iteration_time((16, 32), (100,))
    assert isinstance(t, float) and t == cm.iteration_time([16, 32], [100])


def test_describe_names_the_setting():
    text = opt_13b().describe()
    assert "opt-13b on 1x a100-40gb" in text and "weights read" in text


# ---- monotonicity: more work is never cheaper ------------------------------------

COST_MODELS = [CostModel(load_model(m), load_hardware(h)) for m, h in
               [("opt-13b", "a100-40gb"), ("opt-66b", "a100-40gb"), ("opt-175b", "a100-80gb"),
                ("llama-13b", "h200"), ("tiny", "cpu")]]
lengths = st.integers(min_value=1, max_value=2048)
batches = st.tuples(st.lists(lengths, max_size=6), st.lists(lengths, max_size=64)).filter(
    lambda b: len(b[0]) + len(b[1]) > 0)


@settings(max_examples=200, deadline=None)
@given(batch=batches, which=st.integers(0, len(COST_MODELS) - 1), extra=lengths,
       index=st.integers(min_value=0), grow=st.integers(min_value=1, max_value=512))
def test_more_work_is_never_cheaper(batch, which, extra, index, grow):
    cm = COST_MODELS[which]
    prefill, decode = batch
    t = cm.iteration_time(prefill, decode)
    assert t > 0
    assert cm.iteration_time(prefill + [extra], decode) >= t         # one more prompt
    assert cm.iteration_time(prefill, decode + [extra]) >= t         # one more decode sequence
    if prefill:                                                      # a longer prompt
        longer = list(prefill)
        longer[index % len(longer)] += grow
        assert cm.iteration_time(longer, decode) >= t
    if decode:                                                       # a longer context
        longer = list(decode)
        longer[index % len(longer)] += grow
        assert cm.iteration_time(prefill, longer) >= t


def test_a_fitted_presets_scheduler_time_is_charged_between_iterations():
    from pagedbench.engines.batch import Batch
    from pagedbench.engines.sim.executor import SimExecutor
    from pagedbench.engines.sim.linear_cost import LinearCostModel

    hw = load_hardware("cpu-tiny")
    tiny = load_model("tiny")
    base = LinearCostModel(tiny, hw)
    assert base.scheduler_s == 0.0 and CostModel.scheduler_s == 0.0   # nothing measured: no gap
    timed = LinearCostModel(tiny, dataclasses.replace(hw, fitted={**hw.fitted, "scheduler_s": 0.002}))
    executor = SimExecutor(timed)
    batch = Batch(decode=[], decode_context_lens=[64, 64])
    duration = executor.execute(batch)
    assert duration == pytest.approx(base.iteration_time([], [64, 64]))   # the iteration's own time
    assert executor.now() == pytest.approx(0.002 + duration)               # the clock also ran the gap
    with pytest.raises(ValueError, match="scheduler_s"):
        LinearCostModel(tiny, dataclasses.replace(hw, fitted={**hw.fitted, "scheduler_s": -1}))
