"""Build a real decoder-only transformer from a model preset: seeded random weights, or local pretrained ones."""
from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, OPTConfig, PretrainedConfig

from pagedbench.engines.specs.model import ModelSpec

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """`auto` is float32 on cpu (half-precision matmuls are slow there) and float16 on cuda."""
    if name == "auto":
        return torch.float16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise ValueError(f"backend.dtype={name!r} is not one of {['auto', *DTYPES]}")
    return DTYPES[name]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"backend.device={name!r} but no CUDA device is available")
    if not (name == "cpu" or name.startswith("cuda")):
        raise ValueError(f"backend.device={name!r} is not one of ['auto', 'cpu', 'cuda', 'cuda:N']")
    return torch.device(name)


def hf_config(spec: ModelSpec) -> PretrainedConfig:
    """A transformers config with the preset's shape (OPT or LLaMA architecture)."""
    if spec.arch == "opt":
        return OPTConfig(hidden_size=spec.hidden_size, num_hidden_layers=spec.num_layers, ffn_dim=spec.ffn_size,
                         num_attention_heads=spec.num_heads, vocab_size=spec.vocab_size,
                         max_position_embeddings=spec.max_seq_len, word_embed_proj_dim=spec.hidden_size,
                         do_layer_norm_before=True, dropout=0.0, attention_dropout=0.0)
    return LlamaConfig(hidden_size=spec.hidden_size, num_hidden_layers=spec.num_layers,
                       intermediate_size=spec.ffn_size, num_attention_heads=spec.num_heads,
                       num_key_value_heads=spec.num_kv_heads, vocab_size=spec.vocab_size,
                       max_position_embeddings=spec.max_seq_len)


def build_model(spec: ModelSpec, device: torch.device, dtype: torch.dtype, seed: int = 0,
                path: str | None = None) -> torch.nn.Module:
    """The model in eval mode on `device`.

    Without `path`: the preset's architecture with weights drawn from a
    generator seeded by `seed` (no download is needed or attempted); on a
    GPU they are drawn there (the host took about 20 s for OPT-1.3B's in
    fp16 on two cores). With `path`: weights saved by `save_pretrained` in
    that local folder.
    """
    if path is not None:
        if not Path(path).is_dir():
            raise ValueError(f"model.path={path!r} is not a folder of weights saved with save_pretrained")
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    else:
        torch.manual_seed(seed)   # every device's generator
        with torch.device(device) if device.type == "cuda" else contextlib.nullcontext():
            model = AutoModelForCausalLM.from_config(hf_config(spec), dtype=dtype)
    return model.to(device).eval()
