"""Small real models and a harness that serves requests through the real executor on cpu.

Without a GPU the Triton kernels run under the interpreter (TRITON_INTERPRET=1, set by tests/conftest.py).
"""
import pytest
import torch

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import SchedulerLimits
from pagedbench.engines.registry import engine_config
from pagedbench.engines.loop import run_engine
from pagedbench.engines.specs.model import ModelSpec
from pagedbench.engines.real.attention import register
from pagedbench.engines.real.executor import RealExecutor
from pagedbench.engines.real.kv_cache import KVCache, allocate_kv, bytes_per_slot
from pagedbench.engines.real.swap import allocate_host_blocks
from pagedbench.engines.real.model import build_model
from pagedbench.kernels.ops import load_ops
from pagedbench.workloads.request import Request

SPECS = {
    "opt": ModelSpec(name="opt-test", arch="opt", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4,
                     ffn_size=128, vocab_size=101, max_seq_len=128),
    "llama": ModelSpec(name="llama-test", arch="llama", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2,
                       ffn_size=96, vocab_size=101, max_seq_len=128),
}
ENGINES = {"static": dict(name="static"), "orca": dict(name="orca", reservation="oracle"),
           "paged": dict(name="paged", block_size=4, watermark=0.0, swap_space=0.001)}


@pytest.fixture(scope="module", params=sorted(SPECS))
def arch(request):
    return request.param


def make_model(arch):
    model = build_model(SPECS[arch], torch.device("cpu"), torch.float32, seed=0)
    model.set_attn_implementation(register())
    return model


def make_engine(model, spec, engine, capacity, keep_logits=False, max_num_batched_tokens=256, ops="torch",
                temperature=0.0, cuda_graphs=False, max_num_seqs=256):
    limits = SchedulerLimits(max_seq_len=spec.max_seq_len, max_num_batched_tokens=max_num_batched_tokens,
                             max_num_seqs=max_num_seqs)
    config = engine_config(engine)
    per_slot = bytes_per_slot(spec.num_layers, spec.num_kv_heads, spec.head_dim, torch.float32)
    scheduler = build_scheduler(config, limits, capacity, per_slot)
    cache = allocate_kv(spec.num_layers, spec.num_kv_heads, spec.head_dim, capacity,
                        config.block_size if config.name == "paged" else None, torch.float32, torch.device("cpu"))
    host = None
    if getattr(scheduler.kv, "cpu_pool", None) is not None:
        k, v = allocate_host_blocks(cache.k, scheduler.kv.cpu_pool.num_blocks)
        host = KVCache(k, v, scheduler.kv.cpu_pool.num_blocks * config.block_size, per_slot)
    executor = RealExecutor(model, scheduler.kv, cache, load_ops(ops), torch.device("cpu"),
                            temperature=temperature, keep_logits=keep_logits, host=host, cuda_graphs=cuda_graphs,
                            max_rows=max_num_seqs)
    return scheduler, cache, executor


def serve(model, spec, engine, requests, capacity, capture=None, ops="torch", temperature=0.0, cuda_graphs=False,
          executors=None):
    scheduler, cache, executor = make_engine(model, spec, engine, capacity, keep_logits=capture is not None, ops=ops,
                                             temperature=temperature, cuda_graphs=cuda_graphs)
    if executors is not None:
        executors.append(executor)
    if capture is not None:
        inner = executor.execute

        def execute(batch):
            duration = inner(batch)
            for i, seq in enumerate(batch.advancing()):
                capture.setdefault(seq.id, []).append(executor.last_logits[i])
            return duration
        executor.execute = execute
    record = run_engine(requests, scheduler, executor, progress=False)
    return record, scheduler, cache


def requests(lengths, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [Request(i, 0.0, tuple(torch.randint(0, 101, (p,), generator=gen).tolist()), o)
            for i, (p, o) in enumerate(lengths)]
