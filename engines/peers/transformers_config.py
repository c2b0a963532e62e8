"""The transformers peer's config, and how it maps onto transformers' continuous-batching options.

`TransformersBackendConfig` holds what a run sets (attention, device, dtype,
the KV budget, pages, batch limits, seed); `cb_options` turns it, with the
model on its device, into the `GenerationConfig` and `ContinuousBatchingConfig`
that `model.init_continuous_batching` takes, and says how the KV budget was
mapped. The budget has the real backend's meaning (`pagedbench.engines.real.kv_cache`):
bytes of K and V, turned into `num_blocks` whole-model blocks of `block_size`
tokens (transformers' `page_size`), so both engines hold the same token slots.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig

from pagedbench.engines.real.kv_cache import bytes_per_slot, kv_budget_bytes
from pagedbench.engines.real.vocab import check_choice
from pagedbench.engines.specs.mapping import build_from_mapping

# The implementations transformers' continuous batching runs (ContinuousBatchingManager.switch_to_cb_friendly_attn).
# "paged|sdpa" is gone since transformers 5.x: SDPA reads the paged cache as plain "sdpa".
ATTENTIONS = ("sdpa", "paged|eager", "flash_attention_2", "flash_attention_3")
MIN_BLOCK_SIZE = 4   # transformers' lower bound on page_size (initialization.BOUNDS)


@dataclass(slots=True)
class TransformersBackendConfig:
    name: str = "transformers"
    attention: str = "sdpa"           # sdpa | paged|eager | flash_attention_2 | flash_attention_3 (cuda)
    device: str = "auto"              # auto | cpu | cuda | cuda:N
    dtype: str = "auto"               # auto (fp32 on cpu, fp16 on cuda) | float32 | float16 | bfloat16
    kv_budget_mib: float | None = None    # the KV budget; None: a fraction of free memory (cuda) / the cpu default
    kv_budget_fraction: float = 0.9   # cuda, no kv_budget_mib: transformers sizes KV + activations to this fraction
    cpu_kv_budget_mib: float = 64.0   # cpu default, as the real backend's
    block_size: int = 16              # tokens per page (transformers' page_size; its own default is 256)
    max_batch_tokens: int = 2048      # tokens in one forward (our limits.max_num_batched_tokens)
    max_requests_per_batch: int = 256 # sequences in one forward (our limits.max_num_seqs)
    prefix_sharing: bool = True       # transformers' allow_block_sharing: reuse KV blocks of identical prefixes
    cpu_offload_gib: float = 0.0      # host swap for preempted requests; 0: preemption recomputes (soft reset)
    temperature: float = 0.0          # 0: greedy; > 0: seeded sampling
    seed: int = 0                     # weights (the same model as the real backend's) and sampling
    out_of_vocab: str = "wrap"        # a prompt id outside the vocabulary: wrap | error (engines/real/vocab.py);
                                      # not in conf/backend/transformers.yaml: set it as +backend.out_of_vocab=error

    def __post_init__(self) -> None:
        check_choice(self.out_of_vocab, "backend.out_of_vocab")
        if self.attention not in ATTENTIONS:
            hint = " ('paged|sdpa' is now plain 'sdpa')" if self.attention == "paged|sdpa" else ""
            raise ValueError(f"backend.attention={self.attention!r} is not one of {list(ATTENTIONS)}{hint}")
        if self.block_size < MIN_BLOCK_SIZE:
            raise ValueError(f"backend.block_size must be >= {MIN_BLOCK_SIZE} (transformers' least page_size), "
                             f"got {self.block_size}")
        for key in ("max_batch_tokens", "max_requests_per_batch"):
            if getattr(self, key) < 1:
                raise ValueError(f"backend.{key} must be >= 1, got {getattr(self, key)}")
        if self.kv_budget_mib is not None and self.kv_budget_mib <= 0:
            raise ValueError(f"backend.kv_budget_mib must be > 0, got {self.kv_budget_mib}")
        if not 0 < self.kv_budget_fraction <= 1:
            raise ValueError(f"backend.kv_budget_fraction must be in (0, 1], got {self.kv_budget_fraction}")
        if self.cpu_kv_budget_mib <= 0:
            raise ValueError(f"backend.cpu_kv_budget_mib must be > 0, got {self.cpu_kv_budget_mib}")
        if self.cpu_offload_gib < 0:
            raise ValueError(f"backend.cpu_offload_gib must be >= 0, got {self.cpu_offload_gib}")
        if self.temperature < 0:
            raise ValueError(f"backend.temperature must be >= 0, got {self.temperature}")

    @classmethod
    def from_dict(cls, d: dict) -> "TransformersBackendConfig":
        return build_from_mapping(cls, d, "backend")


@dataclass(slots=True)
class KVSizing:
    """How our KV budget became transformers' cache size. `num_blocks` None: transformers sized it (cuda with no
    kv_budget_mib: KV, activations and its attention mask share `kv_budget_fraction` of the free memory)."""

    budget_bytes: int | None
    bytes_per_slot: int
    block_size: int
    num_blocks: int | None

    @property
    def slots(self) -> int | None:
        return None if self.num_blocks is None else self.num_blocks * self.block_size


def kv_sizing(cfg: TransformersBackendConfig, num_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype,
              device: torch.device) -> KVSizing:
    """Our budget in whole blocks: budget // (block_size x bytes per token), as the real backend's paged pool
    (`allocate_kv`) lays out `budget // bytes_per_slot` slots in `slots // block_size` blocks."""
    per_slot = bytes_per_slot(num_layers, kv_heads, head_dim, dtype)
    if cfg.kv_budget_mib is None and device.type == "cuda":
        return KVSizing(None, per_slot, cfg.block_size, None)
    budget = kv_budget_bytes(device, cfg.kv_budget_mib, cfg.kv_budget_fraction, cfg.cpu_kv_budget_mib)
    blocks = budget // (cfg.block_size * per_slot)
    if blocks < 1:
        raise ValueError(f"a KV budget of {budget / 2**20:.2f} MiB holds no block of {cfg.block_size} tokens "
                         f"({per_slot} bytes per token); raise backend.kv_budget_mib or lower backend.block_size")
    return KVSizing(budget, per_slot, cfg.block_size, blocks)


def cb_options(cfg: TransformersBackendConfig, sizing: KVSizing) -> tuple[GenerationConfig, ContinuousBatchingConfig]:
    """Generation settings (greedy or seeded sampling, EOS disabled: -1 is transformers' "no EOS") and the
    continuous-batching settings: our pages, block count, batch limits, no compile, no switch to flash."""
    sample = cfg.temperature > 0
    generation = GenerationConfig(do_sample=sample, temperature=cfg.temperature if sample else None,
                                  top_k=None, top_p=None, eos_token_id=-1, pad_token_id=0)
    batching = ContinuousBatchingConfig(
        page_size=cfg.block_size, num_blocks=sizing.num_blocks, max_batch_tokens=cfg.max_batch_tokens,
        max_requests_per_batch=cfg.max_requests_per_batch,
        max_memory_percent=cfg.kv_budget_fraction if sizing.num_blocks is None else None,
        allow_block_sharing=cfg.prefix_sharing, cpu_offload_space=cfg.cpu_offload_gib,
        auto_switch_to_flash=False, seed=cfg.seed)
    return generation, batching
