"""Checks shared by the thin Python launchers of the Triton kernels, and the online-softmax step their
attention kernels share.

Importing this module imports triton; `import kernels` does not (see kernels/ops.py).
Triton decides at decoration time whether a kernel is compiled for the GPU or run
by its interpreter (TRITON_INTERPRET=1), so CPU tensors only work when that
variable was set before the kernel modules were imported.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def is_interpreted(kernel) -> bool:
    """True when `kernel` was decorated while TRITON_INTERPRET=1 (runs on the CPU, in numpy)."""
    return not isinstance(kernel, triton.runtime.JITFunction)


def check_device(kernel, *tensors: torch.Tensor) -> None:
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")
    device = devices.pop()
    if device.type != "cuda" and not is_interpreted(kernel):
        raise ValueError(f"Triton kernels need CUDA tensors, got {device}; to run them on the CPU set "
                         "TRITON_INTERPRET=1 before importing kernels.triton_*")


def check_float(name: str, t: torch.Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be one of {FLOAT_DTYPES}, got {t.dtype}")


def check_int(name: str, t: torch.Tensor, dtypes: tuple[torch.dtype, ...]) -> None:
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must be one of {dtypes}, got {t.dtype}")


def check_contiguous(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (shape {tuple(t.shape)}, strides {t.stride()})")


def check_cache_pair(k_cache: torch.Tensor, v_cache: torch.Tensor, ndims: tuple[int, ...]) -> None:
    """K and V caches: same shape and dtype, contiguous, a rank from `ndims`."""
    if k_cache.dim() not in ndims:
        raise ValueError(f"k_cache must have {' or '.join(map(str, ndims))} dims, got shape {tuple(k_cache.shape)}")
    if k_cache.shape != v_cache.shape or k_cache.dtype != v_cache.dtype:
        raise ValueError(f"k_cache {tuple(k_cache.shape)} {k_cache.dtype} and v_cache "
                         f"{tuple(v_cache.shape)} {v_cache.dtype} must match")
    check_float("k_cache", k_cache)
    check_contiguous("k_cache", k_cache)
    check_contiguous("v_cache", v_cache)


def check_last_dim_dense(name: str, t: torch.Tensor) -> None:
    """Rows may be strided (a slice of a fused QKV tensor), but the head_dim axis must be dense."""
    if t.stride(-1) != 1:
        raise ValueError(f"{name} must have stride 1 along head_dim, got strides {t.stride()}")


def pow2(n: int) -> int:
    return triton.next_power_of_2(n)


@triton.jit
def online_softmax_step(scores, v, m_i, l_i, acc, DOT_PRECISION: tl.constexpr):
    """One tile of an online softmax in base 2: `scores` [ROWS, TILE] (already scaled by log2(e) / sqrt(d), -inf
    where masked; each row has a finite score in this tile or an earlier one), `v` [TILE, HEAD_DIM_PAD]; the
    running max `m_i` and sum `l_i` [ROWS] and the unnormalized output `acc` [ROWS, HEAD_DIM_PAD], updated."""
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))
    p = tl.exp2(scores - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return m_new, l_i, acc
