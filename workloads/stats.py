"""Print a workload's trace statistics.

    python -m pagedbench.workloads.stats sharegpt num_requests=1000 seed=0 arrival=poisson request_rate=2

The first argument names conf/workload/<name>.yaml; the rest are key=value
overrides of its fields. A bad name, key or value prints one line and exits 2.
"""
from __future__ import annotations

import argparse
import logging
import sys

from omegaconf import OmegaConf

from pagedbench.paths import CONF
from pagedbench.workloads.build import build_workload
from pagedbench.workloads.config import WorkloadConfig
from pagedbench.workloads.trace_stats import format_stats, trace_stats

CONF_DIR = CONF / "workload"


class UsageError(Exception):
    """A bad command line or workload config, already printed as one line."""


class OneLineParser(argparse.ArgumentParser):
    """argparse with `--help` as usual, but an error is one line on stderr (usage and message together)."""

    def error(self, message: str):
        usage = " ".join(self.format_usage().split())
        print(f"{usage}: error: {message}", file=sys.stderr)
        raise UsageError(message)


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """`NAME [key=value ...]`: a workload config and overrides of its fields, as the last arguments."""
    names = sorted(p.stem for p in CONF_DIR.glob("*.yaml"))
    parser.add_argument("workload", metavar="NAME", help=f"conf/workload/NAME.yaml, one of {', '.join(names)}")
    parser.add_argument("overrides", nargs="*", default=[], metavar="key=value", help="overrides of the workload's fields")


def parse_workload(name: str, overrides: list[str]) -> WorkloadConfig:
    """`NAME key=value ...` as a WorkloadConfig; a bad name, key or value is printed as one line (UsageError)."""
    names = sorted(p.stem for p in CONF_DIR.glob("*.yaml"))
    file = CONF_DIR / f"{name}.yaml"
    if "=" in name or not file.is_file():
        print(f"error: no workload config {name!r}; one of {names}", file=sys.stderr)
        raise UsageError(name)
    try:
        merged = OmegaConf.merge(OmegaConf.load(file), OmegaConf.from_dotlist(overrides))
        return WorkloadConfig.from_dict(OmegaConf.to_container(merged, resolve=True))
    except Exception as err:  # config errors are the user's to fix: one line, no traceback
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        raise UsageError(str(err)) from None


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 printed, 2 bad command line or config, 1 the trace could not be built."""
    try:
        parser = OneLineParser(prog="python -m pagedbench.workloads.stats", description=__doc__.splitlines()[0])
        add_workload_arguments(parser)
        args = parser.parse_args(argv)
        cfg = parse_workload(args.workload, args.overrides)
    except UsageError:
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        requests = build_workload(cfg)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(format_stats(trace_stats(requests), cfg.label))
    return 0


if __name__ == "__main__":
    sys.exit(main())
