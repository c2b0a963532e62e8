"""Attention and KV-cache kernels: Triton kernels beside torch references of the same signature.

`reference` holds the torch versions (what runs on cpu), `triton_*` the
kernels (what runs on cuda, or under TRITON_INTERPRET=1), `triton_launch`
their shared launch checks, and `ops.load_ops` picks one set by name.
Imports only torch and triton; never `engines`.
"""
