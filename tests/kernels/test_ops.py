"""load_ops: choosing an implementation, and `import kernels` not importing triton."""
import subprocess
import sys

import pytest
import torch

from pagedbench.kernels import reference
from pagedbench.kernels.ops import load_ops


def test_torch_ops_are_the_references():
    ops = load_ops("torch")
    assert ops.name == "torch"
    assert ops.paged_decode_attention is reference.paged_decode_attention
    assert ops.write_kv is reference.write_kv


def test_triton_ops_are_the_kernels_every_one():
    ops = load_ops("triton")
    assert ops.paged_decode_attention.__module__ == "pagedbench.kernels.triton_decode_attention"
    assert ops.contiguous_decode_attention.__module__ == "pagedbench.kernels.triton_decode_attention"
    assert ops.write_kv.__module__ == "pagedbench.kernels.triton_write_kv"
    assert ops.copy_blocks.__module__ == "pagedbench.kernels.triton_copy_blocks"
    assert ops.prefill_attention.__module__ == "pagedbench.kernels.triton_prefix_prefill"
    assert ops.prefix_prefill_attention.__module__ == "pagedbench.kernels.triton_prefix_prefill"
    assert ops.name == "triton"


def test_auto_picks_triton_only_with_cuda():
    assert load_ops("auto").name.startswith("triton" if torch.cuda.is_available() else ("cpu", "torch"))


def test_unknown_impl_lists_the_valid_ones():
    with pytest.raises(ValueError, match="torch, cpu, triton, auto"):
        load_ops("cuda")


def test_importing_kernels_and_loading_torch_ops_does_not_import_triton():
    code = ("import sys, kernels, pagedbench.kernels.reference, pagedbench.kernels.ops; pagedbench.kernels.ops.load_ops('torch'); "
            "assert 'triton' not in sys.modules, 'triton was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
