"""The roofline's coefficients worked out by hand on two toy models whose every size is a small number, on a
device of 1 FLOP/s and 1 byte/s, so each coefficient is a whole number of seconds: one OPT without tensor
parallelism, one LLaMA with grouped-query attention over 2 devices. A slip in any term (a factor, a / tp
written * tp, a missing K or V) changes one of them."""
import pytest

from pagedbench.engines.sim.cost_model import CostModel
from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.model import ModelSpec

UNIT = HardwareSpec(name="unit", memory_bytes=1 << 40, peak_flops=1.0, memory_bandwidth=1.0, flops_efficiency=1.0,
                    bandwidth_efficiency=1.0, interconnect_bandwidth=1.0, iteration_overhead_s=0.5,
                    paged_block_cost_tokens=3.0)
OPT = ModelSpec(name="toy-opt", arch="opt", num_layers=2, hidden_size=4, num_heads=2, num_kv_heads=2, ffn_size=8,
                vocab_size=16, max_seq_len=64, dtype_bytes=2, tp=1)
LLAMA = ModelSpec(name="toy-llama", arch="llama", num_layers=1, hidden_size=4, num_heads=4, num_kv_heads=2,
                  ffn_size=8, vocab_size=16, max_seq_len=64, dtype_bytes=2, tp=2)

# OPT: qkv 12 wide, linear params 80 + 76 = 156, GEMM I/O 4h + qkv + q + fc1 + ffn = 16 + 32 = 48 per token;
# element-wise per layer 10h + ReLU 2 ffn = 56, embedding 3h (token + position rows), final norm 2h.
OPT_COEFFS = {"_linear_flop_s": 2 * 2 * 156, "_linear_weight_s": 2 * 156 * 2, "_linear_io_s": 2 * 48 * 2,
              "_elementwise_s": (2 * 56 + 12 + 8) * 2, "_prefill_pair_s": 2 * 2 * 4, "_prefill_io_s": 2 * 24 * 2,
              "_ctx_flop_s": 2 * 4 * 4, "_ctx_byte_s": 2 * 2 * 4 * 2, "_decode_io_s": 2 * 16 * 2,
              "_all_reduce_s": 0.0, "_gather_s": 0.0, "_lm_flop_s": 2 * 4 * 16, "_lm_weight_s": 16 * 4 * 2,
              "_lm_io_s": (4 + 16) * 2, "_overhead_s": 0.5}
# LLaMA on 2 devices: q 4 wide, kv 2 wide, qkv 8; linear params (32 + 16 + 96) / 2 = 72 per device; GEMM I/O
# 4h + (qkv + q + gate-and-up + ffn) / 2 = 16 + 18 = 34; element-wise 10h + SiLU-and-mul 3 ffn / 2 + rotary
# 2 (q + kv) / 2 = 58, embedding 2h, final norm 2h; ring all-reduce 2 (tp - 1) / tp = 1 of h, twice a layer
# and once more; logits gather (tp - 1) / tp of the vocabulary.
LLAMA_COEFFS = {"_linear_flop_s": 2 * 72, "_linear_weight_s": 72 * 2, "_linear_io_s": 34 * 2,
                "_elementwise_s": (58 + 8 + 8) * 2, "_prefill_pair_s": 2 * 4 / 2, "_prefill_io_s": (8 + 8) / 2 * 2,
                "_ctx_flop_s": 4 * 4 / 2, "_ctx_byte_s": 2 * 2 / 2 * 2, "_decode_io_s": (8 + 4) / 2 * 2,
                "_all_reduce_s": 3 * 1 * 4 * 2, "_gather_s": 0.5 * 16 * 2, "_lm_flop_s": 2 * 4 * 16 / 2,
                "_lm_weight_s": 16 * 4 / 2 * 2, "_lm_io_s": (4 + 16 / 2) * 2, "_overhead_s": 0.5}


@pytest.mark.parametrize("model, coeffs", [(OPT, OPT_COEFFS), (LLAMA, LLAMA_COEFFS)], ids=["opt", "llama-tp2"])
def test_every_coefficient_by_hand(model, coeffs):
    cm = CostModel(model, UNIT)
    assert {k: getattr(cm, k) for k in coeffs} == pytest.approx(coeffs)


def test_the_block_penalty_applies_to_the_paged_layout_only():
    assert CostModel(OPT, UNIT, block_size=4)._block_tokens == 3.0
    assert CostModel(OPT, UNIT)._block_tokens == 0.0


def test_each_roofline_takes_the_larger_of_compute_and_memory():
    cm = CostModel(LLAMA, UNIT)
    # One decode row of context 5: attention compute 5 x 8 = 40 > memory 5 x 4 + 12 = 32; linear: memory
    # 144 + 68 > compute 144; LM head: memory 64 + 24 > compute 64; element-wise 148, communication 24 + 16.
    parts = cm.breakdown([], [5])
    assert parts == pytest.approx({"linear": 212, "elementwise": 148, "attention_prefill": 0, "attention_decode": 40,
                                   "lm_head": 88, "communication": 40, "overhead": 0.5})
    assert cm.iteration_time([], [5]) == pytest.approx(sum(parts.values()))
    # A prefill of 4 tokens: 4 x 5 = 20 pair units x 4 = 80 of compute > 4 x 16 = 64 of memory.
    parts = cm.breakdown([4], [])
    assert parts["attention_prefill"] == pytest.approx(80)
    assert cm.iteration_time([4], []) == pytest.approx(sum(parts.values()))
    # Memory-bound attention: OPT's decode of context 5 reads 5 x 32 + 64 = 224 > computes 5 x 32 = 160.
    opt = CostModel(OPT, UNIT)
    assert opt.breakdown([], [5])["attention_decode"] == pytest.approx(224)
    assert opt.iteration_time([], [5]) == pytest.approx(sum(opt.breakdown([], [5]).values()))
