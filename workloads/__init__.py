"""Request traces for the benchmark: ShareGPT, Alpaca, chat, translation and synthetic workloads.

Loaders (`sharegpt`, `chat`, `alpaca`, `alpaca_synthetic`, `translation`, `synthetic`), tokenizers
and their cache, length filters, arrival processes, and `build_workload`,
which turns a `WorkloadConfig` into a seeded, reproducible list of
`Request`s; `stats` and `write_trace` are its commands. The first stage of
the pipeline: imports nothing of `engines`, `kernels` or `results` (only
`paths`, for where its configs live).
"""
from pagedbench.workloads.build import build_workload
from pagedbench.workloads.config import WorkloadConfig
from pagedbench.workloads.length_dist import LengthDist
from pagedbench.workloads.request import Request
from pagedbench.workloads.trace_stats import format_stats, trace_stats

__all__ = ["Request", "WorkloadConfig", "LengthDist", "build_workload", "trace_stats", "format_stats"]
