"""Request traces for the benchmark: ShareGPT, Alpaca and synthetic workloads."""
from workloads.build import build_workload
from workloads.config import WorkloadConfig
from workloads.length_dist import LengthDist
from workloads.request import Request
from workloads.trace_stats import format_stats, trace_stats

__all__ = ["Request", "WorkloadConfig", "LengthDist", "build_workload", "trace_stats", "format_stats"]
