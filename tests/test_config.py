"""Every config group option composes and builds its dataclass; bad choices fail with a clear line."""
import subprocess
import sys

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
import pytest

from pagedbench.engines.config import ContiguousEngineConfig, PagedEngineConfig
from pagedbench.engines.registry import engine_config
from pagedbench.engines.specs.hardware import HardwareSpec
from pagedbench.engines.specs.model import ModelSpec
from pagedbench.workloads import WorkloadConfig
import pagedbench.run  # noqa: F401  (registers the config resolvers)
from pagedbench.paths import ROOT

CONF = ROOT / "conf"
GROUPS = {"engine": None, "workload": WorkloadConfig, "model": ModelSpec, "hardware": HardwareSpec,
          "backend": None, "logger": None}


def options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_group_option_composes(group, option):
    # The trace workload replays a file: it needs one.
    extra = [f"workload.path={ROOT / 'tests' / 'data' / 'trace_small.jsonl'}"] if option == "trace" else []
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=[f"{group}={option}", *extra])
    node = OmegaConf.to_container(cfg[group], resolve=True)
    if group == "engine":
        assert engine_config(node).name == node["name"]
    elif GROUPS[group] is not None:
        GROUPS[group].from_dict(node)
    else:
        assert node["name"] == option


# Capacity searches of groups of sequences and of prefixes run 10-minute traces (their files say so).
TEN_MINUTES = ("sampling", "beam", "saving", "prefix", "swap_capacity")


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_composes_with_its_sweep(experiment):
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=[f"experiment={experiment}"], return_hydra_config=True)
    assert cfg.experiment_name == experiment
    assert cfg.hydra.sweeper.params, "an experiment lists what it sweeps"
    if experiment.endswith("_real"):   # small scale on this machine: the real backend, one run at a time
        assert cfg.backend.name == "real" and cfg.model.name == "tiny" and cfg.workload.arrival == "offline"
        assert cfg.hydra.launcher._target_.endswith("BasicLauncher")
    else:
        assert cfg.backend.name == "sim"
    if experiment in ("block_size", "swap", "saving"):   # only the paged engine has blocks
        assert cfg.engine.name == "paged" and "engine" not in cfg.hydra.sweeper.params
    if experiment in TEN_MINUTES:
        assert cfg.workload.duration_s == 600 and cfg.workload.arrival == "poisson"
    elif experiment != "memory_waste" and not experiment.endswith("_real"):
        # the paper's traces last one hour; memory_waste is offline
        assert cfg.workload.duration_s == 3600 and cfg.workload.arrival == "poisson"
    WorkloadConfig.from_dict(OmegaConf.to_container(cfg.workload, resolve=True))
    engine_config(OmegaConf.to_container(cfg.engine, resolve=True))


@pytest.mark.parametrize("launcher", ["local", "slurm"])
def test_launcher_configs_compose(launcher):
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher" if launcher == "local" else "SlurmLauncher")


def test_orca_variants_set_their_reservation():
    for reservation in ("max", "pow2", "oracle"):
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            cfg = compose(config_name="config", overrides=[f"engine=orca_{reservation}"])
        assert engine_config(OmegaConf.to_container(cfg.engine)).label == f"orca-{reservation}"


def test_each_engine_option_holds_only_the_keys_its_engine_reads():
    """paged.yaml holds no contiguous key, static.yaml and orca.yaml no paged key but the shared sweep key
    (block_size); the host swap memory is the run's top-level `swap_space`."""
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        keys = {e: set(compose(config_name="config", overrides=[f"engine={e}"]).engine) for e in ("static", "orca",
                                                                                                  "paged")}
        assert compose(config_name="config").swap_space == 4
    assert keys["paged"] == {"name", "block_size", "watermark", "preemption"}
    assert keys["static"] == keys["orca"] == {"name", "reservation", "allocator", "block_size"}
    with pytest.raises(ValueError, match=r"unknown engine \(name=orca\) key\(s\) \['watermark'\]"):
        engine_config({"name": "orca", "watermark": 0.1})
    with pytest.raises(ValueError, match=r"unknown engine key\(s\) \['allocator'\]"):
        engine_config({"name": "paged", "allocator": "buddy"})
    with pytest.raises(ValueError, match="unknown engine 'vllm'"):
        engine_config({"name": "vllm"})
    assert engine_config({"name": "paged"}, swap_space=64).swap_space == 64
    assert isinstance(engine_config({"name": "static", "block_size": 8}), ContiguousEngineConfig)
    assert engine_config({"name": "static", "block_size": 8}).block_size is None
    assert isinstance(engine_config({"name": "paged", "block_size": 8}), PagedEngineConfig)


def test_every_engine_accepts_the_shared_sweep_keys():
    # `-m engine=static,orca,paged engine.block_size=8,16` must compose for each engine.
    for engine in ("static", "orca", "paged"):
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            compose(config_name="config", overrides=[f"engine={engine}", "engine.block_size=8"])


@pytest.mark.parametrize("args,expected", [
    (["engine=foo"], "engine=foo is not an option; valid: orca, orca_max"),
    (["-m", "engine=paged,nope"], "engine=nope is not an option"),
    (["engine.block_size=3", "workload=synthetic", "workload.num_requests=5"], "block_size must be a power of two"),
    (["workload=synthetic", "workload.arrival=poison"], "arrival must be one of"),
])
def test_bad_input_is_one_clear_line(args, expected, tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "run.py"), *args, f"hydra.run.dir={tmp_path}"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert expected in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("option", options("sampling"))
def test_sampling_options_set_n_or_beam_width_on_any_workload(option):
    for workload in ("sharegpt", "alpaca", "translation"):
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            cfg = compose(config_name="config", overrides=[f"workload={workload}", f"sampling={option}"])
        built = WorkloadConfig.from_dict(OmegaConf.to_container(cfg.workload, resolve=True))
        width = int(option[-1]) if option != "none" else 1
        assert (built.n, built.beam_width) == ((width, 1) if option.startswith("n") and option != "none"
                                               else (1, width))
