"""transformers' continuous batching as a peer: config checks, KV sizing, a short trace replayed on a small Llama,
greedy tokens equal to `model.generate`'s, and the OPT architecture refused with one line."""
import random

import pytest
import torch

from pagedbench.engines.peers.timeline import to_sequence
from pagedbench.engines.peers.transformers_cb import load_model, replay_on_manager, replay_transformers, start_manager, warm_up
from pagedbench.engines.peers.transformers_config import TransformersBackendConfig, cb_options, kv_sizing
from pagedbench.engines.real.kv_cache import bytes_per_slot
from pagedbench.engines.real.model import build_model
from pagedbench.engines.sequence import Status
from pagedbench.engines.specs.model import ModelSpec
from pagedbench.workloads.request import Request

LLAMA = ModelSpec(name="llama-test", arch="llama", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                  ffn_size=128, vocab_size=1000, max_seq_len=512)
OPT = ModelSpec(name="opt-test", arch="opt", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4,
                ffn_size=128, vocab_size=1000, max_seq_len=512)
PER_SLOT = bytes_per_slot(2, 2, 16, torch.float32)   # LLAMA in fp32: 512 bytes of K and V per token
CPU = torch.device("cpu")


def trace(n=6, span_s=1.0, seed=0):
    """Prompts of 5-40 tokens (ids beyond the vocabulary: the replays set out_of_vocab=wrap), outputs of 3-12 tokens."""
    rng = random.Random(seed)
    return [Request(i, round(i * span_s / n, 3), tuple(rng.randrange(60000) for _ in range(rng.randint(5, 40))),
                    rng.randint(3, 12)) for i in range(n)]


# ---- config ----------------------------------------------------------------------------------------------------

def test_defaults_are_valid():
    cfg = TransformersBackendConfig()
    assert (cfg.name, cfg.attention, cfg.block_size, cfg.max_batch_tokens, cfg.seed) == (
        "transformers", "sdpa", 16, 2048, 0)
    assert TransformersBackendConfig.from_dict({"attention": "paged|eager"}).attention == "paged|eager"


@pytest.mark.parametrize("kwargs, message", [
    (dict(attention="paged|sdpa"), "now plain 'sdpa'"),
    (dict(attention="flash"), "is not one of"),
    (dict(block_size=2), "block_size must be >= 4"),
    (dict(max_batch_tokens=0), "max_batch_tokens must be >= 1"),
    (dict(max_requests_per_batch=0), "max_requests_per_batch must be >= 1"),
    (dict(kv_budget_mib=0), "kv_budget_mib must be > 0"),
    (dict(kv_budget_fraction=1.5), r"kv_budget_fraction must be in \(0, 1\]"),
    (dict(cpu_kv_budget_mib=-1), "cpu_kv_budget_mib must be > 0"),
    (dict(cpu_offload_gib=-1), "cpu_offload_gib must be >= 0"),
    (dict(temperature=-0.5), "temperature must be >= 0"),
])
def test_invalid_config_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformersBackendConfig(**kwargs)


def test_unknown_key_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown backend key\(s\) \['kernels'\]; valid keys"):
        TransformersBackendConfig.from_dict({"kernels": "triton"})


def test_flash_attention_needs_cuda():
    with pytest.raises(ValueError, match="needs a cuda device"):
        load_model(TransformersBackendConfig(device="cpu", attention="flash_attention_2"), LLAMA)


def test_wide_requests_are_refused_before_the_model_is_built():
    wide = Request(0, 0.0, (1, 2, 3), 4, n=2)
    with pytest.raises(ValueError, match="one sequence per request"):
        replay_transformers([wide], LLAMA, TransformersBackendConfig(device="cpu"))


# ---- KV sizing -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("budget_mib, block_size, blocks", [(1.0, 16, 128), (1.3, 16, 166), (1.0, 32, 64)])
def test_budget_becomes_whole_blocks(budget_mib, block_size, blocks):
    cfg = TransformersBackendConfig(kv_budget_mib=budget_mib, block_size=block_size)
    sizing = kv_sizing(cfg, 2, 2, 16, torch.float32, CPU)
    assert sizing.num_blocks == blocks == int(budget_mib * 2**20) // (block_size * PER_SLOT)
    assert sizing.slots * PER_SLOT <= sizing.budget_bytes < (sizing.slots + block_size) * PER_SLOT
    generation, batching = cb_options(cfg, sizing)
    assert (batching.num_blocks, batching.page_size, batching.max_batch_tokens) == (blocks, block_size, 2048)
    assert batching.auto_switch_to_flash is False and batching.max_memory_percent is None
    assert generation.eos_token_id == -1 and generation.do_sample is False


def test_cpu_default_budget_and_cuda_fraction():
    sizing = kv_sizing(TransformersBackendConfig(), 2, 2, 16, torch.float32, CPU)
    assert sizing.budget_bytes == 64 * 2**20 and sizing.num_blocks == 64 * 2**20 // (16 * PER_SLOT)
    # cuda without kv_budget_mib: transformers sizes the cache to the fraction of free memory (nothing is read here)
    cfg = TransformersBackendConfig(kv_budget_fraction=0.5)
    sizing = kv_sizing(cfg, 2, 2, 16, torch.float16, torch.device("cuda"))
    assert sizing.num_blocks is None and sizing.budget_bytes is None
    assert cb_options(cfg, sizing)[1].max_memory_percent == 0.5


def test_budget_below_one_block_is_refused():
    cfg = TransformersBackendConfig(kv_budget_mib=0.001)
    with pytest.raises(ValueError, match="holds no block of 16 tokens"):
        kv_sizing(cfg, 2, 2, 16, torch.float32, CPU)


# ---- replays ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def replay():
    requests = trace()
    cfg = TransformersBackendConfig(device="cpu", kv_budget_mib=1.0, out_of_vocab="wrap")
    measured, wall, info = replay_transformers(requests, LLAMA, cfg, progress=False)
    return requests, measured, wall, info


def test_trace_replays_with_every_token(replay):
    requests, measured, wall, _ = replay
    assert [m.request.id for m in measured] == [r.id for r in requests]
    for m in measured:
        r = m.request
        assert m.error is None
        assert m.output_tokens == len(m.token_times_s) == r.output_len
        assert m.prompt_tokens == r.prompt_len
        assert r.arrival_s <= m.sent_s < m.token_times_s[0]
        assert all(a < b for a, b in zip(m.token_times_s, m.token_times_s[1:]))
        seq = to_sequence(m)
        assert seq.status is Status.FINISHED and seq.generated == r.output_len
    assert max(m.token_times_s[-1] for m in measured) <= wall + 1e-9
    assert wall >= requests[-1].arrival_s


def test_engine_reports_our_kv_budget(replay):
    requests, _, _, info = replay
    assert info["kv_block_size"] == 16
    assert info["kv_num_blocks"] == 2**20 // (16 * PER_SLOT) == 128
    assert info["kv_bytes"] == info["kv_slots"] * PER_SLOT == info["kv_budget_bytes"] == 2**20
    assert info["kv_bytes_allocated"] > info["kv_bytes"]      # plus transformers' two padding sectors
    assert info["attention"] == "sdpa" and info["max_batch_tokens"] == 2048
    assert info["out_of_vocab"] == "wrap" and info["requests_wrapped"] == sum(
        max(r.prompt_token_ids) >= LLAMA.vocab_size for r in requests)
    # one forward per generated token at most; fewer when requests overlapped
    assert max(r.output_len for r in requests) <= info["forward_steps"] <= sum(r.output_len for r in requests)


@pytest.mark.parametrize("attention", ["sdpa", "paged|eager"])
def test_greedy_tokens_equal_generate_and_eos_is_ignored(attention):
    cfg = TransformersBackendConfig(device="cpu", attention=attention, kv_budget_mib=1.0)
    model = load_model(cfg, LLAMA)
    same = build_model(LLAMA, CPU, torch.float32, seed=cfg.seed)           # the real backend's model
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), same.state_dict().values()))
    requests = [Request(i, 0.0, r.prompt_token_ids, 10) for i, r in enumerate(trace(3, seed=1))]
    # Reference: plain generate, greedy, on the same weights (sdpa outside continuous batching).
    model.set_attn_implementation("sdpa")
    model.generation_config.eos_token_id = None
    reference = {}
    for r in requests:
        ids = torch.tensor([[t % LLAMA.vocab_size for t in r.prompt_token_ids]])
        out = model.generate(ids, max_new_tokens=r.output_len, do_sample=False, pad_token_id=0)
        reference[r.id] = out[0, ids.shape[1]:].tolist()
    # Make the model's own EOS a token greedy decoding emits: the peer must still generate every token.
    model.generation_config.eos_token_id = model.config.eos_token_id = reference[0][0]
    model.set_attn_implementation(attention)
    manager, _ = start_manager(model, cfg)
    try:
        warm_up(manager, LLAMA)
        steps = manager.current_batch
        measured, _, tokens = replay_on_manager(manager, requests, LLAMA.vocab_size, progress=False,
                                                out_of_vocab="wrap")
        steps = manager.current_batch - steps
    finally:
        manager.stop(block=True, timeout=30, hard_stop=True)
    assert tokens == reference
    assert [m.output_tokens for m in measured] == [10, 10, 10]
    assert steps < 30                                   # the three requests shared forward passes


def test_an_id_outside_the_vocabulary_stops_the_replay_before_the_model_runs_unless_wrapped():
    requests = [Request(0, 0.0, (1, 2), 2), Request(1, 0.0, (3, LLAMA.vocab_size), 2)]
    with pytest.raises(ValueError, match=rf"request 1: prompt token 1 is id {LLAMA.vocab_size}, outside"):
        replay_on_manager(None, requests, LLAMA.vocab_size, progress=False)


def test_opt_is_refused_with_one_line():
    with pytest.raises(ValueError, match=r"cannot run model opt-test \(arch opt\).*llama presets") as err:
        replay_transformers(trace(1), OPT, TransformersBackendConfig(device="cpu", kv_budget_mib=1.0))
    assert "\n" not in str(err.value)


def test_preempted_requests_still_produce_every_token():
    """8 blocks of 16 tokens for six requests of 30 + 20 tokens (4 blocks each at the end): transformers preempts
    (soft reset: frees the KV, recomputes later). Each request still counts every token, its times in order."""
    rng = random.Random(0)
    requests = [Request(i, 0.0, tuple(rng.randrange(60000) for _ in range(30)), 20) for i in range(6)]
    cfg = TransformersBackendConfig(device="cpu", kv_budget_mib=8 * 16 * PER_SLOT / 2**20, out_of_vocab="wrap")
    measured, _, info = replay_transformers(requests, LLAMA, cfg, progress=False)
    assert info["kv_num_blocks"] == 8
    for m in measured:
        assert m.error is None and m.output_tokens == len(m.token_times_s) == 20
        assert all(a <= b for a, b in zip(m.token_times_s, m.token_times_s[1:]))
