"""Attention and KV-cache kernels: Triton kernels beside torch references of the same signature."""
