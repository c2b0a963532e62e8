"""Where a sweep writes (the `sweep_dir` config resolver) and whether the multirun that just ended had failed
runs (set by the sweep's callback, results/report/callback.py; read by the run command to exit 1)."""
from __future__ import annotations

from omegaconf import OmegaConf


def sweep_dir(experiment: str | None, stamp: str) -> str:
    """An experiment sweeps into outputs/experiments/NAME (re-running it skips finished runs);
    any other multirun into outputs/multirun/DATE/TIME."""
    return f"outputs/experiments/{experiment}" if experiment else f"outputs/multirun/{stamp}"


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("sweep_dir"):
        OmegaConf.register_new_resolver("sweep_dir", sweep_dir)


_failures: list[str] = []   # set when a multirun ends: one line if some of its runs failed (this process only)


def note_failure(line: str) -> str:
    """Record the line saying which runs of the multirun that just ended failed; the line."""
    _failures.append(line)
    return line


def sweep_failures() -> str | None:
    """The line saying which runs of the multirun that just ended failed, or None (the run command exits 1)."""
    return _failures[-1] if _failures else None
