"""Set up the real backend for one run: device, model, KV tensors in the engine's layout, executor."""
from __future__ import annotations

from dataclasses import dataclass
import os

import torch

from engines.build import build_scheduler
from engines.config import EngineConfig, SchedulerLimits
from engines.specs.mapping import build_from_mapping
from engines.specs.model import ModelSpec
from engines.real.attention import register
from engines.real.executor import RealExecutor
from engines.real.kv_cache import KVCache, allocate_kv, bytes_per_slot, kv_budget_bytes
from engines.real.model import build_model, resolve_device, resolve_dtype
from engines.real.swap import allocate_host_blocks
from kernels.ops import load_ops


@dataclass(slots=True)
class RealBackendConfig:
    name: str = "real"
    device: str = "auto"              # auto | cpu | cuda | cuda:N
    dtype: str = "auto"               # auto (fp32 on cpu, fp16 on cuda) | float32 | float16 | bfloat16
    kernels: str = "auto"             # auto (triton on cuda, torch on cpu) | torch | triton
    kv_budget_mib: float | None = None    # the KV budget; None: a fraction of free memory (cuda) / the cpu default
    kv_budget_fraction: float = 0.9   # cuda: of the memory free after loading the model
    cpu_kv_budget_mib: float = 64.0   # cpu default: small enough that memory binds on the default trace
    temperature: float = 0.0          # 0: greedy; > 0: seeded sampling
    seed: int = 0                     # weights and sampling

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"backend.temperature must be >= 0, got {self.temperature}")

    @classmethod
    def from_dict(cls, d: dict) -> "RealBackendConfig":
        return build_from_mapping(cls, d, "backend")


@dataclass(slots=True)
class RealSetup:
    scheduler: object
    executor: RealExecutor
    device: str
    dtype: str
    kernels: str
    budget_bytes: int
    bytes_per_slot: int
    num_slots: int

    def describe(self) -> str:
        return (f"KV budget: {self.budget_bytes / 2**20:.1f} MiB = {self.num_slots:,} token slots "
                f"({self.bytes_per_slot / 1024:.1f} KiB/token) on {self.device}, {self.dtype}, {self.kernels} kernels")


def available_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def host_load() -> dict:
    """torch's intra-op thread count, the machine's cores and its 1-minute load average (NaN where unknown).

    Wall-clock figures on a CPU are only comparable on a quiet machine: a second job on two cores made the
    default run 9x slower. The summary records these so a reader can tell.
    """
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return {"torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "load_avg_1m": load}


def check_fits(spec: ModelSpec, dtype: torch.dtype, device: torch.device) -> None:
    """Refuse, with a clear message, a model whose weights alone exceed the memory available."""
    need = spec.num_params * torch.finfo(dtype).bits // 8
    have = available_bytes(device)
    if need > have:
        raise ValueError(f"model {spec.name} needs {need / 2**30:.1f} GiB of weights in {dtype} but {device} has "
                         f"{have / 2**30:.1f} GiB available; pick a smaller model (e.g. model=tiny) or backend=sim")


def build_real(backend: RealBackendConfig, spec: ModelSpec, engine: EngineConfig, limits: SchedulerLimits) -> RealSetup:
    device = resolve_device(backend.device)
    dtype = resolve_dtype(backend.dtype, device)
    ops = load_ops("triton" if backend.kernels == "auto" and device.type == "cuda" else
                   "torch" if backend.kernels == "auto" else backend.kernels)
    if spec.path is None:
        check_fits(spec, dtype, device)
    model = build_model(spec, device, dtype, seed=backend.seed, path=spec.path)
    model.set_attn_implementation(register())
    cfg = model.config
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    per_slot = bytes_per_slot(cfg.num_hidden_layers, kv_heads, head_dim, dtype)
    budget = kv_budget_bytes(device, backend.kv_budget_mib, backend.kv_budget_fraction, backend.cpu_kv_budget_mib)
    slots = budget // per_slot
    # The same slots for every engine; each lays them out its way.
    scheduler = build_scheduler(engine, limits, slots, per_slot)
    cache = allocate_kv(cfg.num_hidden_layers, kv_heads, head_dim, slots,
                        engine.block_size if engine.name == "paged" else None, dtype, device)
    host = None
    cpu_pool = getattr(scheduler.kv, "cpu_pool", None)
    if cpu_pool is not None:
        host_k, host_v = allocate_host_blocks(cache.k, cpu_pool.num_blocks)
        host = KVCache(host_k, host_v, cpu_pool.num_blocks * engine.block_size, per_slot)
    executor = RealExecutor(model, scheduler.kv, cache, ops, device, backend.temperature, backend.seed, host=host)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return RealSetup(scheduler, executor, device_name, str(dtype).removeprefix("torch."), ops.name,
                     budget, per_slot, slots)
