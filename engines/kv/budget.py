"""How many KV token slots fit on the serving group, the way vLLM sizes its cache.

    usable = memory per device * tp * gpu_memory_utilization
    kv     = usable - weights - activation reserve
    slots  = kv // kv_bytes_per_token

Every engine gets the same budget; they differ only in how they spend it.
"""
from __future__ import annotations

from dataclasses import dataclass

from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.model import ModelSpec

GiB = 1 << 30
KiB = 1 << 10

LOGITS_BYTES = 4    # logits are upcast to fp32 before sampling


def activation_reserve_bytes(model: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int) -> int:
    """Peak activation memory of the largest forward pass, summed over the group.

    vLLM measures this with a profiling forward pass of `max_num_batched_tokens`
    tokens spread over `max_num_seqs` sequences; here it is computed. Per device:

    - inside a layer, for each of the T = max_num_batched_tokens tokens, at once:
      the residual stream and its normed copy (2 * hidden, replicated on every
      device), the fused QKV output (qkv_size / tp) and the MLP's first
      projection (ffn, or 2 * ffn for LLaMA's gate and up; / tp). Counting the
      QKV and MLP tensors together is an upper bound: each layer frees the
      first before it makes the second.
    - the sampler's inputs: fp32 logits and their softmax probabilities for one
      token of each of `max_num_seqs` sequences, full vocabulary (gathered on
      the device that samples).

    Every device reserves the worst device's amount, since the cache is sized
    to fit on all of them, so the total is tp times that.
    """
    tp = model.tp
    layer_width = 2 * model.hidden_size + (model.qkv_size + model.mlp_up_size) // tp
    layer_peak = max_num_batched_tokens * layer_width * model.dtype_bytes
    sampler = 2 * max_num_seqs * model.vocab_size * LOGITS_BYTES
    return tp * (layer_peak + sampler)


@dataclass(slots=True, frozen=True)
class KVBudget:
    total_bytes: int            # usable memory of the group: memory * tp * utilization
    weight_bytes: int
    activation_bytes: int
    kv_bytes: int               # total - weights - activations
    kv_bytes_per_token: int     # all layers, K and V, whole group
    num_slots: int              # kv_bytes // kv_bytes_per_token

    def describe(self) -> str:
        return (f"KV budget: {self.kv_bytes / GiB:.2f} GiB = {self.num_slots:,} token slots "
                f"({self.kv_bytes_per_token / KiB:.1f} KiB/token); weights {self.weight_bytes / GiB:.1f} GiB, "
                f"activations {self.activation_bytes / GiB:.1f} GiB, usable {self.total_bytes / GiB:.1f} GiB")


def kv_budget(model: ModelSpec, hw: HardwareSpec, gpu_memory_utilization: float = 0.9,
              max_num_batched_tokens: int = 2048, max_num_seqs: int = 256) -> KVBudget:
    """The KV cache the group can hold once weights and activations are placed.

    Raises ValueError when nothing is left for the cache; a budget smaller than
    one max_seq_len request is returned as is (the engines decide what to do).
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    for key, value in (("max_num_batched_tokens", max_num_batched_tokens), ("max_num_seqs", max_num_seqs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a positive integer, got {value!r}")
    total = int(hw.memory_bytes * model.tp * gpu_memory_utilization)
    weights = model.weight_bytes
    activations = activation_reserve_bytes(model, max_num_batched_tokens, max_num_seqs)
    kv = total - weights - activations
    where = f"{model.name} on {model.tp}x {hw.name} at utilization {gpu_memory_utilization}"
    if kv <= 0:
        raise ValueError(f"no memory left for the KV cache: {where} has {total / GiB:.1f} GiB usable, "
                         f"weights take {weights / GiB:.1f} GiB and activations {activations / GiB:.1f} GiB; "
                         f"use more devices (model.tp), a larger device or a smaller model")
    return KVBudget(total_bytes=total, weight_bytes=weights, activation_bytes=activations, kv_bytes=kv,
                    kv_bytes_per_token=model.kv_bytes_per_token, num_slots=kv // model.kv_bytes_per_token)
