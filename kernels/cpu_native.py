"""Native CPU kernels (kernels/cpu_attention.c) behind the torch references' signatures.

    ops = load_ops("cpu")          # decode attention and the KV write in C, plain prefill in torch (tiled),
                                   # prefix prefill and block copies the references'

The C file is compiled once per machine (the C compiler `$CC`, else cc, with -O3 -march=native) into
`$PAGEDBENCH_KERNEL_CACHE` (default ~/.cache/pagedbench/kernels), named by a hash of the source, the flags and
this CPU's instruction-set flags, and loaded with ctypes; a compile is a second or two, a load a millisecond.
`available()` says whether it built, and why not.

Decode attention reads each sequence's K and V in place, through its block table (paged) or its arena region
(contiguous), once each: the references gather every sequence's blocks into a buffer first and run a few
torch ops per sequence, which on one CPU thread cost about twice what one read in place does
(docs/performance.md). The same arithmetic as the references (fp32 scores and softmax, the output rounded
once to the query's dtype); tests/kernels/test_cpu_native.py compares them.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.resources
import os
from pathlib import Path
import platform
import shutil
import subprocess
import tempfile

import torch

from pagedbench.kernels import reference

SOURCE = Path(str(importlib.resources.files("pagedbench.kernels") / "cpu_attention.c"))   # package data in a wheel
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-ffp-contract=fast", "-fassociative-math",
         "-fno-signed-zeros", "-fno-trapping-math", "-shared", "-fPIC")
SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
ERRORS = {1: "a block table names a block outside the cache", 2: "a slot or region lies outside the cache",
          3: "out of memory for the scores"}


class NativeUnavailable(RuntimeError):
    """The C kernels could not be compiled or loaded here (no C compiler, a compile error)."""


def cache_dir() -> Path:
    return Path(os.environ.get("PAGEDBENCH_KERNEL_CACHE") or Path.home() / ".cache" / "pagedbench" / "kernels")


def _cpu_flags() -> str:
    """This CPU's instruction-set flags (what -march=native compiles for), so a library is never loaded on
    another CPU that shares the cache folder."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _compiler() -> str:
    named = os.environ.get("CC")
    cc = shutil.which(named) if named else shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if named and not cc:
        raise NativeUnavailable(f"the C compiler CC={named} was not found; set backend.kernels=torch to run "
                                "the torch references instead")
    if not cc:
        raise NativeUnavailable("no C compiler found (set CC, or install gcc); set backend.kernels=torch to "
                                "run the torch references instead")
    return cc


def library_path() -> Path:
    cc = _compiler()
    key = hashlib.sha256("\0".join([SOURCE.read_text(), cc, *FLAGS, _cpu_flags(), platform.machine()]).encode())
    return cache_dir() / f"cpu_attention-{key.hexdigest()[:16]}.so"


@functools.cache
def _library() -> ctypes.CDLL:
    if platform.system() != "Linux" and platform.system() != "Darwin":
        raise NativeUnavailable(f"native kernels are built on Linux and macOS only, not {platform.system()}")
    path = library_path()
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:   # built aside, then renamed: no torn library
            built = Path(tmp) / path.name
            try:
                done = subprocess.run([_compiler(), *FLAGS, "-o", str(built), str(SOURCE), "-lm"],
                                      capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.SubprocessError) as err:
                raise NativeUnavailable(f"compiling {SOURCE.name} failed: {err}") from err
            if done.returncode != 0:
                raise NativeUnavailable(f"compiling {SOURCE.name} failed:\n{done.stderr.strip()}")
            os.replace(built, path)
    lib = ctypes.CDLL(str(path))
    ptr, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    for name in SUFFIX.values():
        fn = getattr(lib, f"decode_attention_{name}")
        fn.argtypes = [ptr, ptr, ptr, ptr, ptr, i64, i64, i64, ptr, i64, ptr, i64, i64, i64, i64, f32]
        fn.restype = ctypes.c_int
        fn = getattr(lib, f"write_kv_{name}")
        fn.argtypes = [ptr, ptr, ptr, ptr, ptr, i64, i64, i64]
        fn.restype = ctypes.c_int
    return lib


def available() -> tuple[bool, str]:
    """(True, "") when the native kernels load here; else (False, why)."""
    try:
        _library()
    except (NativeUnavailable, OSError) as err:
        return False, str(err)
    return True, ""


def _check(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    for name, t in (("query", query), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.device.type != "cpu":
            raise ValueError(f"native CPU kernels need CPU tensors, got {name} on {t.device}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (shape {tuple(t.shape)}, strides {t.stride()})")
        if t.dtype != k_cache.dtype or t.dtype not in SUFFIX:
            raise TypeError(f"{name} is {t.dtype}; the native kernels need one of {tuple(SUFFIX)} shared by the "
                            f"query and both caches (k_cache is {k_cache.dtype})")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} must match")
    if query.dim() != 3 or query.shape[-1] != k_cache.shape[-1] or query.shape[1] % k_cache.shape[-2]:
        raise ValueError(f"query {tuple(query.shape)} does not fit a cache of {k_cache.shape[-2]} KV heads of "
                         f"{k_cache.shape[-1]}: [num_seqs, a multiple of the KV heads, head_dim] expected")


def _decode_inputs(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, context_lens: torch.Tensor,
                   layout: str) -> torch.Tensor:
    """The checks both decode kernels make, for a cache of `layout` ("[num_blocks, block_size, num_kv_heads,
    head_dim]" or "[num_slots, num_kv_heads, head_dim]"); the context lengths as a dense int32 vector."""
    _check(query, k_cache, v_cache)
    if k_cache.dim() != layout.count(",") + 1:
        raise ValueError(f"k_cache must be {layout}, got {tuple(k_cache.shape)}")
    return _int_vector("context_lens", context_lens, torch.int32, query.shape[0])


def _int_vector(name: str, t: torch.Tensor, dtype: torch.dtype, num: int) -> torch.Tensor:
    if t.dim() != 1 or t.shape[0] != num:
        raise ValueError(f"{name} must have shape ({num},), got {tuple(t.shape)}")
    return t.to(device="cpu", dtype=dtype).contiguous()


def _raise(code: int) -> None:
    if code:
        raise IndexError(ERRORS.get(code, f"native kernel error {code}"))


def _decode(query, k_cache, v_cache, tables, table_stride, block_size, num_blocks, starts, num_slots, lens, scale):
    out = torch.empty_like(query)
    num_seqs, num_heads, head_dim = query.shape
    if num_seqs:
        fn = getattr(_library(), f"decode_attention_{SUFFIX[query.dtype]}")
        _raise(fn(query.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(),
                  tables, table_stride, block_size, num_blocks, starts, num_slots, lens.data_ptr(),
                  num_seqs, num_heads, k_cache.shape[-2], head_dim, float(scale)))
    return out


def paged_decode_attention(query: torch.Tensor,         # [num_seqs, num_heads, head_dim]
                           k_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim]
                           v_cache: torch.Tensor,       # [num_blocks, block_size, num_kv_heads, head_dim]
                           block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32
                           context_lens: torch.Tensor,  # [num_seqs] int32, >= 1
                           scale: float,
                           num_splits: int = 1,          # split-K partitions (a Triton tuning knob; ignored here)
                           num_stages: int | None = None,  # load pipelining stages (Triton only; ignored here)
                           num_warps: int | None = None,   # warps per program (Triton only; ignored here)
                           table_loads: str = "position",  # block-table loads per position or block (ignored here)
                           ) -> torch.Tensor:            # [num_seqs, num_heads, head_dim]
    """One query token per sequence attending over its context, read in place through its block table."""
    lens = _decode_inputs(query, k_cache, v_cache, context_lens, "[num_blocks, block_size, num_kv_heads, head_dim]")
    num_seqs = query.shape[0]
    tables = block_tables if block_tables.dtype == torch.int32 else block_tables.to(torch.int32)
    if tables.dim() != 2 or tables.shape[0] < num_seqs or (tables.shape[1] > 1 and tables.stride(1) != 1):
        raise ValueError(f"block_tables must be [num_seqs, max_blocks] with dense rows, got shape "
                         f"{tuple(tables.shape)}, strides {tables.stride()}")
    num_blocks, block_size = k_cache.shape[:2]
    if num_seqs and int(lens.max()) > tables.shape[1] * block_size:
        raise ValueError(f"a context of {int(lens.max())} tokens is longer than its block table "
                         f"({tables.shape[1]} blocks of {block_size})")
    return _decode(query, k_cache, v_cache, tables.data_ptr(), tables.stride(0), block_size, num_blocks, None,
                   0, lens, scale)


def contiguous_decode_attention(query: torch.Tensor,         # [num_seqs, num_heads, head_dim]
                                k_cache: torch.Tensor,       # [num_slots, num_kv_heads, head_dim]
                                v_cache: torch.Tensor,       # [num_slots, num_kv_heads, head_dim]
                                seq_starts: torch.Tensor,    # [num_seqs] int64: first slot of each region
                                context_lens: torch.Tensor,  # [num_seqs] int32, >= 1
                                scale: float,
                                num_splits: int = 1,          # split-K partitions (ignored here)
                                num_stages: int | None = None,  # load pipelining stages (ignored here)
                                num_warps: int | None = None,   # warps per program (ignored here)
                                ) -> torch.Tensor:            # [num_seqs, num_heads, head_dim]
    """One query token per sequence attending over its context at (start, length) in the arena, in place."""
    lens = _decode_inputs(query, k_cache, v_cache, context_lens, "[num_slots, num_kv_heads, head_dim]")
    starts = _int_vector("seq_starts", seq_starts, torch.int64, query.shape[0])
    return _decode(query, k_cache, v_cache, None, 0, 1, 0, starts.data_ptr(), k_cache.shape[0], lens, scale)


def write_kv(key: torch.Tensor,          # [num_tokens, num_kv_heads, head_dim]
             value: torch.Tensor,        # [num_tokens, num_kv_heads, head_dim]
             k_cache: torch.Tensor,      # [num_blocks, block_size, num_kv_heads, head_dim] or [num_slots, num_kv_heads, head_dim]
             v_cache: torch.Tensor,      # same shape as k_cache
             slot_mapping: torch.Tensor  # [num_tokens] int64; a negative slot means skip
             ) -> None:
    """Store each new token's K and V at its slot (reshape_and_cache); another dtype than the cache's, or
    strided rows, go through the reference."""
    if key.dtype != k_cache.dtype or value.dtype != k_cache.dtype or not (key.is_contiguous() and value.is_contiguous()):
        return reference.write_kv(key, value, k_cache, v_cache, slot_mapping)
    _check(key, k_cache, v_cache)
    if value.shape != key.shape:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} must match")
    slots = _int_vector("slot_mapping", slot_mapping, torch.int64, key.shape[0])
    row = key.shape[1] * key.shape[2]
    if key.shape[1:] != k_cache.shape[-2:]:
        raise ValueError(f"key rows {tuple(key.shape[1:])} do not match the cache's {tuple(k_cache.shape[-2:])}")
    num_slots = k_cache.numel() // row if row else 0
    fn = getattr(_library(), f"write_kv_{SUFFIX[key.dtype]}")
    _raise(fn(key.data_ptr(), value.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), slots.data_ptr(),
              key.shape[0], row, num_slots))


PREFILL_TILE = 96    # query rows per tile of the causal prefill: 64, 96 and 128 timed alike at 262 to 1,000 tokens


@functools.lru_cache(maxsize=PREFILL_TILE)
def _causal_mask(rows: int) -> torch.Tensor:
    """[rows, rows] fp32: -inf above the diagonal, 0 on and below it (a tile's own keys)."""
    return torch.full((rows, rows), float("-inf")).triu_(1)


def prefill_attention(query: torch.Tensor,       # [num_tokens, num_heads, head_dim]
                      key: torch.Tensor,         # [num_tokens, num_kv_heads, head_dim]
                      value: torch.Tensor,       # [num_tokens, num_kv_heads, head_dim]
                      cu_seqlens: torch.Tensor,  # [num_seqs + 1] int32: sequence s is tokens cu[s]:cu[s+1]
                      scale: float,
                      max_seqlen: int | None = None,   # the longest sequence (unused here)
                      ) -> torch.Tensor:         # [num_tokens, num_heads, head_dim]
    """Causal attention of each packed sequence over its own new tokens, in torch, fp32, tile by tile: the
    queries of a sequence in tiles of PREFILL_TILE rows, each tile scored against the keys up to its last row
    (one batched product over the heads), the causal mask added to its own square, a softmax and one product
    with V, written in place into the output. Keys past a tile are never scored, so the products do about half
    the work of a whole square, and a tile's scores stay in the core's cache. On one CPU thread this ran
    1.3-4.7x faster than one masked product per sequence at 262 to 1,000 tokens (MHA and GQA), and up to 1.23x
    slower at 8 x 30 tokens (`python scripts/cpu_backend_bench.py prefill`; docs/performance.md)."""
    out = torch.empty_like(query)
    num_heads, num_kv_heads, head_dim = query.shape[1], key.shape[1], query.shape[2]
    group = num_heads // num_kv_heads
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        n = end - start
        if n == 0:
            continue
        # [Hkv, group, n, D]: query head kv * group + g at (kv, g); K and V [Hkv, 1, n, D] broadcast over g.
        q = query[start:end].float().view(n, num_kv_heads, group, head_dim).permute(1, 2, 0, 3)
        k = key[start:end].float().transpose(0, 1).unsqueeze(1)
        v = value[start:end].float().transpose(0, 1).unsqueeze(1)
        o = out[start:end].view(n, num_kv_heads, group, head_dim).permute(1, 2, 0, 3)
        for a in range(0, n, PREFILL_TILE):
            b = min(n, a + PREFILL_TILE)
            scores = torch.matmul(q[:, :, a:b], k[:, :, :b].transpose(-1, -2))      # [Hkv, group, b - a, b]
            scores.mul_(scale)
            scores[..., a:b] += _causal_mask(b - a)
            o[:, :, a:b] = torch.matmul(torch.softmax(scores, dim=-1), v[:, :, :b])
    return out


prefix_prefill_attention = reference.prefix_prefill_attention
copy_blocks = reference.copy_blocks
