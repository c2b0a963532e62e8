"""The shape of a decoder-only transformer (OPT or LLaMA): sizes, parameters, KV bytes.

Pure arithmetic on the published architecture; nothing here allocates a
tensor. The cost model and the KV budget read their numbers from here, so
every engine sees the same model.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from pagedbench.engines.specs.mapping import build_from_mapping

ARCHS = ("opt", "llama")
DTYPE_BYTES = (1, 2, 4)

# OPT's learned positional embedding has 2 extra rows (HF OPTLearnedPositionalEmbedding offset).
OPT_POSITION_OFFSET = 2


@dataclass(slots=True)
class ModelSpec:
    name: str
    arch: str               # "opt" | "llama"
    num_layers: int
    hidden_size: int
    num_heads: int          # query heads
    num_kv_heads: int       # key/value heads (== num_heads without grouped-query attention)
    ffn_size: int           # MLP intermediate width
    vocab_size: int
    max_seq_len: int        # prompt + output of one request
    dtype_bytes: int = 2    # weights, activations and KV cache (fp16/bf16)
    tp: int = 1             # tensor-parallel degree (number of devices)
    path: str | None = None # real backend: a local folder of weights saved with save_pretrained (None: random)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"model.name must be a non-empty string, got {self.name!r}")
        if self.arch not in ARCHS:
            raise ValueError(f"model.arch={self.arch!r} is not one of {list(ARCHS)}")
        for key in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_size",
                    "vocab_size", "max_seq_len", "dtype_bytes", "tp"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"model.{key} must be a positive integer, got {value!r}")
        if self.dtype_bytes not in DTYPE_BYTES:
            raise ValueError(f"model.dtype_bytes must be one of {list(DTYPE_BYTES)}, got {self.dtype_bytes}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"model.num_heads={self.num_heads} does not divide "
                             f"hidden_size={self.hidden_size}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"model.num_kv_heads={self.num_kv_heads} does not divide "
                             f"num_heads={self.num_heads}")
        if self.arch == "opt" and self.num_kv_heads != self.num_heads:
            raise ValueError(f"OPT has no grouped-query attention: num_kv_heads={self.num_kv_heads} "
                             f"must equal num_heads={self.num_heads}")
        if self.num_kv_heads % self.tp:
            # Each device holds whole KV heads, so the KV bytes split evenly across the group.
            raise ValueError(f"model.tp={self.tp} must divide num_kv_heads={self.num_kv_heads} "
                             f"(and num_heads={self.num_heads})")

    @classmethod
    def from_dict(cls, d) -> "ModelSpec":
        """Build from a plain mapping (a YAML preset); an unknown key names the valid ones."""
        return build_from_mapping(cls, d, "model")

    # ---- sizes ---------------------------------------------------------------

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def qkv_size(self) -> int:
        """Output width of the fused Q, K, V projection."""
        return (self.num_heads + 2 * self.num_kv_heads) * self.head_dim

    @property
    def mlp_up_size(self) -> int:
        """Output width of the MLP's first projection: fc1 (OPT) or gate and up (LLaMA)."""
        return self.ffn_size if self.arch == "opt" else 2 * self.ffn_size

    # ---- parameters ----------------------------------------------------------

    @property
    def linear_params_per_layer(self) -> int:
        """Weights (and, for OPT, biases) of one layer's matrix multiplies: QKV, out proj, MLP."""
        h, f = self.hidden_size, self.ffn_size
        if self.arch == "opt":
            attention = h * self.qkv_size + self.qkv_size + h * h + h
            mlp = h * f + f + f * h + h
        else:
            attention = h * self.qkv_size + h * h
            mlp = 3 * h * f              # gate, up, down; no biases
        return attention + mlp

    @property
    def norm_params_per_layer(self) -> int:
        """Two norms per layer: LayerNorm (weight and bias) for OPT, RMSNorm (weight) for LLaMA."""
        return 4 * self.hidden_size if self.arch == "opt" else 2 * self.hidden_size

    @property
    def num_params(self) -> int:
        h = self.hidden_size
        embeddings = self.vocab_size * h
        if self.arch == "opt":
            embeddings += (self.max_seq_len + OPT_POSITION_OFFSET) * h
            final_norm = 2 * h
            lm_head = 0                  # tied to the token embedding
        else:
            final_norm = h
            lm_head = self.vocab_size * h
        per_layer = self.linear_params_per_layer + self.norm_params_per_layer
        return embeddings + self.num_layers * per_layer + final_norm + lm_head

    @property
    def weight_bytes(self) -> int:
        """All weights of the model, summed over the tensor-parallel group."""
        return self.num_params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token, all layers, summed over the tensor-parallel group."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes
