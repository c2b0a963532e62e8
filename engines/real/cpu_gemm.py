"""The model's linear layers on a CPU through oneDNN with weights packed once, as vLLM's CPU worker runs them.

torch's `F.linear` on this machine's CPU (fp32, one thread) took 16.6 ms for the tiny model's LM head (50,272 x
256) at 23 rows; the same product through oneDNN with the weight reordered once into its blocked layout took
7.1 ms, and the decoder's own projections 10-30% less (`python scripts/cpu_backend_bench.py gemm` prints the
table).
The LM head is a third of a decode step's time there, so this is the largest single cost of the CPU backend.

`pack_linears(model)` swaps every `nn.Linear` for a `PackedLinear` holding the packed weight (a tied LM head
gets its own packed copy; the embedding keeps the original). The result equals `F.linear`'s to fp32 rounding
(the products are summed in another order), so greedy tokens can differ where two logits tie to ~1e-6;
tests/real/test_cpu_gemm.py checks the engines' tokens on a trace. `backend.cpu_gemm=torch` keeps `F.linear`.
"""
from __future__ import annotations

import torch

CPU_GEMMS = ("onednn", "torch")
PACK_ROWS = 32     # the row count oneDNN's weight layout is chosen for (vLLM packs for 32 too); any count runs


def onednn_available(dtype: torch.dtype) -> bool:
    """Whether this torch has the oneDNN linear ops, for `dtype` on this CPU."""
    if not torch.backends.mkldnn.is_available() or dtype not in (torch.float32, torch.bfloat16):
        return False
    if dtype == torch.bfloat16 and not torch.backends.mkldnn.is_acceptable(torch.empty(0, dtype=dtype)):
        return False
    return hasattr(torch.ops.mkldnn, "_reorder_linear_weight") and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedLinear(torch.nn.Module):
    """y = x W^T + b with W packed by oneDNN; `weight` is not kept (the packed copy replaces it)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        self.register_buffer("packed", torch.ops.mkldnn._reorder_linear_weight(weight, PACK_ROWS), persistent=False)
        bias = linear.bias
        self.register_buffer("bias", None if bias is None else bias.detach().clone(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        out = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        return out.view(*x.shape[:-1], self.out_features)


def pack_linears(model: torch.nn.Module) -> int:
    """Replace every nn.Linear of a CPU model by a PackedLinear; returns how many were replaced."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, PackedLinear(child))
                replaced += 1
    return replaced


def apply_cpu_gemm(model: torch.nn.Module, choice: str, device: torch.device, dtype: torch.dtype) -> str:
    """The GEMM the model's linears run: `onednn` packs them on a CPU that has it, else `torch` (F.linear).
    Returns what runs, for the run record."""
    if choice not in CPU_GEMMS:
        raise ValueError(f"backend.cpu_gemm={choice!r} is not one of {list(CPU_GEMMS)}")
    if device.type != "cpu" or choice == "torch" or not onednn_available(dtype):
        return "torch"
    pack_linears(model)
    return "onednn"
