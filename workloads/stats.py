"""Print a workload's trace statistics.

    python -m workloads.stats sharegpt num_requests=1000 seed=0 arrival=poisson request_rate=2

The first argument names conf/workload/<name>.yaml; the rest are key=value
overrides of its fields. A bad name, key or value prints one line and exits 2.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from omegaconf import OmegaConf

from workloads.build import build_workload
from workloads.config import WorkloadConfig
from workloads.trace_stats import format_stats, trace_stats

CONF_DIR = Path(__file__).resolve().parent.parent / "conf" / "workload"


def parse_workload(argv: list[str]) -> WorkloadConfig | int:
    """`NAME key=value ...` as a WorkloadConfig; or, after printing one line, the exit status 2."""
    names = sorted(p.stem for p in CONF_DIR.glob("*.yaml"))
    if not argv or "=" in argv[0]:
        print(f"usage: NAME [key=value ...]; NAME one of {names}", file=sys.stderr)
        return 2
    file = CONF_DIR / f"{argv[0]}.yaml"
    if not file.is_file():
        print(f"error: no workload config {argv[0]!r}; one of {names}", file=sys.stderr)
        return 2
    try:
        merged = OmegaConf.merge(OmegaConf.load(file), OmegaConf.from_dotlist(argv[1:]))
        return WorkloadConfig.from_dict(OmegaConf.to_container(merged, resolve=True))
    except Exception as err:  # config errors are the user's to fix: one line, no traceback
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2


def main(argv: list[str]) -> int:
    """Exit status: 0 printed, 2 bad command line or config, 1 the trace could not be built."""
    if not argv or "=" in argv[0]:
        names = sorted(p.stem for p in CONF_DIR.glob("*.yaml"))
        print(f"usage: python -m workloads.stats NAME [key=value ...]; NAME one of {names}", file=sys.stderr)
        return 2
    cfg = parse_workload(argv)
    if isinstance(cfg, int):
        return cfg
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        requests = build_workload(cfg)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(format_stats(trace_stats(requests), cfg.label))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
