"""Set up the real backend for one run: device, model, KV tensors in the engine's layout, executor."""
from __future__ import annotations

from dataclasses import dataclass, field
import logging
import os

import torch

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import EngineConfig, SchedulerLimits
from pagedbench.engines.protocols import Scheduler
from pagedbench.engines.specs.mapping import build_from_mapping
from pagedbench.engines.specs.model import ModelSpec
from pagedbench.engines.real.attention import register
from pagedbench.engines.real.cpu_gemm import apply_cpu_gemm
from pagedbench.engines.real.executor import RealExecutor
from pagedbench.engines.real.kv_cache import KVCache, allocate_kv, bytes_per_slot, kv_budget_bytes
from pagedbench.engines.real.model import build_model, resolve_device, resolve_dtype
from pagedbench.engines.real.swap import allocate_host_blocks
from pagedbench.engines.real.vocab import check_choice
from pagedbench.kernels.ops import load_ops

log = logging.getLogger("pagedbench")


@dataclass(slots=True)
class RealBackendConfig:
    name: str = "real"
    device: str = "auto"              # auto | cpu | cuda | cuda:N
    dtype: str = "auto"               # auto (fp32 on cpu, fp16 on cuda) | float32 | float16 | bfloat16
    kernels: str = "auto"             # auto (triton on cuda; cpu, the native C kernels, on a cpu) | torch | cpu | triton
    kv_budget_mib: float | None = None    # the KV budget; None: a fraction of free memory (cuda) / the cpu default
    kv_budget_fraction: float = 0.9   # cuda: of the memory free after loading the model
    cpu_kv_budget_mib: float = 64.0   # cpu default: small enough that memory binds on the default trace
    temperature: float = 0.0          # 0: greedy; > 0: seeded sampling
    seed: int = 0                     # weights and sampling
    # Two keys not in conf/backend/real.yaml (a change there would make the sim's records stale: conf/ is in the
    # sim's result scope): set them with a leading +, e.g. `+backend.cpu_gemm=torch`. The run's summary names both.
    cpu_gemm: str = "onednn"          # cpu: onednn (linears packed once, engines/real/cpu_gemm.py) | torch (F.linear)
    out_of_vocab: str = "wrap"        # a prompt id outside the model's vocabulary: wrap (id mod vocab size, counted
                                      # in the summary: the packaged traces are cl100k ids, past the tiny model's
                                      # 50,272) | error (the run stops, naming the request)
    cuda_graphs: bool = False         # greedy decode steps through static buffers and row buckets (engines/real/
                                      # graphs.py): CUDA graphs on a GPU, the same step eagerly on a CPU; False: eager

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"backend.temperature must be >= 0, got {self.temperature}")
        check_choice(self.out_of_vocab, "backend.out_of_vocab")

    @classmethod
    def from_dict(cls, d: dict) -> "RealBackendConfig":
        return build_from_mapping(cls, d, "backend")


@dataclass(slots=True)
class RealSetup:
    scheduler: Scheduler
    executor: RealExecutor
    model: str
    device: str
    dtype: str
    kernels: str
    budget_bytes: int
    bytes_per_slot: int
    num_slots: int
    gemm: str = "torch"                        # what the model's linears run (engines/real/cpu_gemm.py)
    load: dict = field(default_factory=dict)   # host_load() when the backend was built

    @property
    def where(self) -> str:
        return self.device

    def describe(self) -> str:
        return (f"{self.model}: KV budget: {self.budget_bytes / 2**20:.1f} MiB = {self.num_slots:,} token slots "
                f"({self.bytes_per_slot / 1024:.1f} KiB/token) on {self.device}, {self.dtype}, {self.kernels} kernels, "
                f"{self.gemm} linears" + (", decode through static row buckets"
                                           f"{' (CUDA graphs)' if self.executor.graphs.capture else ''}"
                                           if self.executor.graphs is not None else ""))

    def summary_fields(self) -> dict:
        return {"device": self.device, "dtype": self.dtype, "kernels": self.kernels, "gemm": self.gemm,
                "cuda_graphs": self.executor.graphs is not None,
                "out_of_vocab": self.executor.out_of_vocab,
                "kv_budget_bytes": self.budget_bytes, "kv_budget_slots": self.num_slots,
                "torch_threads": self.load.get("torch_threads"), "cpu_count": self.load.get("cpu_count"),
                "load_avg_1m_start": self.load.get("load_avg_1m")}

    def after_run_fields(self, busy_s: float) -> dict:
        """Time inside the model forward, the requests whose prompt ids were folded into the vocabulary, and the
        machine's load when the run ended."""
        forward = self.executor.forward_s
        wrapped = len(self.executor.wrapped)
        if wrapped:
            log.warning("%d requests had prompt ids outside the model's vocabulary of %d, folded into it "
                        "(backend.out_of_vocab=wrap)", wrapped, self.executor.vocab_size)
        graphs = self.executor.graphs
        return {"requests_wrapped": wrapped, "forward_s": forward,
                "static_decode_steps": graphs.steps if graphs is not None else 0,
                "static_padded_rows": graphs.padded_rows if graphs is not None else 0, "forward_fraction_of_iterations": forward / busy_s if busy_s > 0 else None,
                "load_avg_1m_end": host_load()["load_avg_1m"]}


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


@dataclass(slots=True)
class LoadedModel:
    """A model on its device with our attention hook, and the kernels its KV layouts use: built once,
    shared by every engine built over it (`build_real(..., loaded=)`)."""

    spec: ModelSpec
    model: torch.nn.Module
    device: torch.device
    dtype: torch.dtype
    ops: object               # pagedbench.kernels.ops: torch references, native CPU or Triton kernels
    num_layers: int
    kv_heads: int
    head_dim: int
    gemm: str = "torch"       # what its linears run: torch (F.linear) or onednn (packed; engines/real/cpu_gemm.py)

    @property
    def bytes_per_slot(self) -> int:
        return bytes_per_slot(self.num_layers, self.kv_heads, self.head_dim, self.dtype)


def load_real_model(backend: RealBackendConfig, spec: ModelSpec) -> LoadedModel:
    device = resolve_device(backend.device)
    dtype = resolve_dtype(backend.dtype, device)
    ops = load_ops(backend.kernels, device.type)
    if spec.path is None:
        check_fits(spec, dtype, device)
    model = build_model(spec, device, dtype, seed=backend.seed, path=spec.path)
    model.set_attn_implementation(register())
    gemm = apply_cpu_gemm(model, backend.cpu_gemm, device, dtype)
    cfg = model.config
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return LoadedModel(spec, model, device, dtype, ops, cfg.num_hidden_layers, kv_heads, head_dim, gemm)


def build_real(backend: RealBackendConfig, spec: ModelSpec, engine: EngineConfig, limits: SchedulerLimits,
               loaded: LoadedModel | None = None) -> RealSetup:
    """Scheduler, KV tensors in the engine's layout and wall-clock executor over `backend`'s KV budget.
    `loaded`: a model already loaded for `backend` and `spec` (else it is loaded here)."""
    if loaded is None:
        loaded = load_real_model(backend, spec)
    device, dtype, per_slot = loaded.device, loaded.dtype, loaded.bytes_per_slot
    budget = kv_budget_bytes(device, backend.kv_budget_mib, backend.kv_budget_fraction, backend.cpu_kv_budget_mib)
    slots = budget // per_slot
    # The same slots for every engine; each lays them out its way.
    scheduler = build_scheduler(engine, limits, slots, per_slot)
    cache = allocate_kv(loaded.num_layers, loaded.kv_heads, loaded.head_dim, slots,
                        engine.block_size, dtype, device)
    host = None
    host_blocks = scheduler.kv.host_blocks
    if host_blocks:
        host_k, host_v = allocate_host_blocks(cache.k, host_blocks)
        host = KVCache(host_k, host_v, host_blocks * engine.block_size, per_slot)
    executor = RealExecutor(loaded.model, scheduler.kv, cache, loaded.ops, device, backend.temperature,
                            backend.seed, host=host, out_of_vocab=backend.out_of_vocab,
                            cuda_graphs=backend.cuda_graphs, max_rows=limits.max_num_seqs)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    load = host_load()
    if load["load_avg_1m"] > load["cpu_count"]:
        log.warning("the machine's load (%.1f over the last minute) exceeds its %d cores: other jobs share them, "
                    "so this run's wall-clock figures will read slow; time runs one at a time",
                    load["load_avg_1m"], load["cpu_count"])
    return RealSetup(scheduler, executor, spec.name, device_name, str(dtype).removeprefix("torch."),
                     loaded.ops.name, budget, per_slot, slots, loaded.gemm, load)
