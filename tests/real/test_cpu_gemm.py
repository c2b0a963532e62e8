"""The CPU backend's linears packed by oneDNN (engines/real/cpu_gemm.py): same products, same tokens, every engine."""
import pytest
import torch

from pagedbench.engines.real.build import RealBackendConfig, build_real, load_real_model
from pagedbench.engines.real.cpu_gemm import PackedLinear, apply_cpu_gemm, onednn_available, pack_linears
from pagedbench.engines.config import SchedulerLimits
from pagedbench.engines.registry import engine_config
from pagedbench.engines.specs.model import ModelSpec

from tests.real.conftest import ENGINES, SPECS, make_model, requests, serve

needs_onednn = pytest.mark.skipif(not onednn_available(torch.float32), reason="this torch has no oneDNN linear")


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 1, 64), (1, 23, 64), (3, 5, 64), (7, 64)])
def test_a_packed_linear_equals_f_linear_on_any_leading_shape(shape, bias):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 101, bias=bias)
    x = torch.randn(shape)
    packed = PackedLinear(linear)
    got = packed(x)
    assert got.shape == (*shape[:-1], 101)
    torch.testing.assert_close(got, linear(x), atol=1e-5, rtol=1e-5)
    assert packed.bias is None if not bias else torch.equal(packed.bias, linear.bias)


@needs_onednn
def test_every_linear_of_the_model_is_packed_the_tied_head_included():
    model = make_model("opt")
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    assert pack_linears(model) == len(linears) == 2 * 6 + 1      # 2 layers x (q, k, v, out, fc1, fc2) + LM head
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert isinstance(model.lm_head, PackedLinear)
    assert model.get_input_embeddings().weight.shape == (101, 64)   # the embedding keeps its own weight


def test_the_choice_is_checked_and_torch_or_a_non_cpu_device_packs_nothing():
    model = make_model("opt")
    with pytest.raises(ValueError, match="backend.cpu_gemm='mkl' is not one of"):
        apply_cpu_gemm(model, "mkl", torch.device("cpu"), torch.float32)
    assert apply_cpu_gemm(model, "torch", torch.device("cpu"), torch.float32) == "torch"
    assert apply_cpu_gemm(model, "onednn", torch.device("meta"), torch.float32) == "torch"
    assert apply_cpu_gemm(model, "onednn", torch.device("cpu"), torch.float16) == "torch"   # oneDNN's linear: fp32/bf16
    assert type(model.lm_head) is torch.nn.Linear


@needs_onednn
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_packed_linears_give_every_engine_the_same_tokens_and_close_logits(arch, engine):
    lengths = [(6, 20), (7, 18), (5, 22), (8, 16)]
    got = {}
    for gemm in ("torch", "onednn"):
        model, spec = make_model(arch), SPECS[arch]
        apply_cpu_gemm(model, gemm, torch.device("cpu"), torch.float32)
        captured = {}
        capacity = 48 if engine == "paged" else 128          # the paged engine preempts (12 blocks of 4)
        record, _, _ = serve(model, spec, ENGINES[engine], requests(lengths, seed=1), capacity=capacity,
                             capture=captured)
        got[gemm] = ({s.id: s.output_token_ids for s in record.sequences},
                     {i: torch.stack(rows) for i, rows in captured.items()})
    assert got["onednn"][0] == got["torch"][0]
    for i, logits in got["torch"][1].items():
        torch.testing.assert_close(got["onednn"][1][i], logits, atol=1e-4, rtol=1e-4)


@needs_onednn
def test_the_backend_packs_on_a_cpu_by_default_and_says_so_in_the_record():
    spec = ModelSpec(name="opt-test", arch="opt", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4,
                     ffn_size=128, vocab_size=101, max_seq_len=128)
    limits = SchedulerLimits(max_seq_len=128)
    for choice, runs in (("onednn", "onednn"), ("torch", "torch")):
        backend = RealBackendConfig(device="cpu", cpu_gemm=choice, kv_budget_mib=1)
        loaded = load_real_model(backend, spec)
        assert loaded.gemm == runs
        setup = build_real(backend, spec, engine_config(dict(name="paged", block_size=4)), limits, loaded=loaded)
        assert setup.summary_fields()["gemm"] == runs and f"{runs} linears" in setup.describe()
    assert RealBackendConfig().cpu_gemm == "onednn"
