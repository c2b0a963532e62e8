"""Progress bars: the engine loop's says which clock its rates are on; a long trace is built behind one."""
import io

from hydra import compose, initialize_config_dir
import pytest
from tqdm import tqdm

import pagedbench.engines.loop as loop
from pagedbench.engines.loop import progress_text, run_engine
from pagedbench import run as entry
from pagedbench.paths import ROOT
import pagedbench.workloads.trace_size as trace_size
from pagedbench.workloads import WorkloadConfig, build_workload

SMALL = ["backend=sim", "workload=synthetic", "workload.num_requests=30", "model=opt-13b", "hardware=a100-40gb"]


class RecordingBar(tqdm):
    """A tqdm bar writing to a buffer that keeps every postfix it was given."""

    made: list["RecordingBar"] = []

    def __init__(self, *args, **kwargs):
        kwargs["file"] = io.StringIO()
        self.postfixes = []
        super().__init__(*args, **kwargs)
        RecordingBar.made.append(self)

    def set_postfix_str(self, s="", refresh=True):
        self.postfixes.append(s)
        super().set_postfix_str(s, refresh)


@pytest.fixture
def bar(monkeypatch):
    RecordingBar.made = []
    monkeypatch.setattr(loop, "tqdm", RecordingBar)
    monkeypatch.setattr(loop, "PROGRESS_EVERY_S", -1.0)   # show after every iteration
    return RecordingBar.made


def sim_backend(*extra: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[*SMALL, *extra])
    rc = entry.RunConfig.parse(cfg)
    backend = rc.build_backend(cfg.gpu_memory_utilization)
    backend.executor.warmup()
    backend.executor.start_clock()
    return build_workload(rc.workload), backend


class WallNamed:
    """The sim's executor under the real backend's name: the bar shows wall-clock rates."""

    name = "real"

    def __init__(self, executor):
        self.executor = executor

    def __getattr__(self, attr):
        return getattr(self.executor, attr)


def test_progress_text_labels_the_sim_clock_and_the_wall_clock():
    assert progress_text("sim", 312.54, 4210.4, 8, 0.5) == "sim_t=312.5s sim_tok/s=4,210 batch=8 kv=50%"
    assert progress_text("real", 12.0, 95.6, 3, 0.25) == "tok/s=96 batch=3 kv=25%"


def test_sim_bar_shows_simulated_time_and_simulated_throughput(bar):
    requests, backend = sim_backend("backend.fast_forward=false")   # one postfix per step
    record = run_engine(requests, backend.scheduler, backend.executor, progress=True)
    [made] = bar
    shown = made.postfixes
    assert len(shown) == len(record.iterations)
    assert all(s.startswith("sim_t=") and " sim_tok/s=" in s for s in shown)
    assert not any("tok_s" in s for s in shown)
    # The last: the sim's clock at the end of the last iteration, and its rows over the simulated time since
    # the one before ended (no wall-clock figure; an offline trace never idles).
    last, before = record.iterations[-1], record.iterations[-2]
    end, end_before = last.start_s + last.duration_s, before.start_s + before.duration_s
    assert shown[-1] == progress_text("sim", end, last.batch_rows / (end - end_before), last.batch_size,
                                      1 - last.free / record.capacity_slots)
    assert f"sim_t={record.end_s:.1f}s" in shown[-1]


def test_with_the_fast_forward_the_bar_shows_each_pass_and_ends_on_the_last_row(bar):
    requests, backend = sim_backend()
    record = run_engine(requests, backend.scheduler, backend.executor, progress=True)
    [made] = bar
    shown, last = made.postfixes, record.iterations[-1]
    assert 0 < len(shown) < len(record.iterations)   # quiet steps run several to a pass
    assert shown[-1].startswith(f"sim_t={record.end_s:.1f}s ")
    assert shown[-1].endswith(f" batch={last.batch_size} kv={1 - last.free / record.capacity_slots:.0%}")


def test_a_wall_clock_executor_shows_tok_per_s_without_the_sim_label(bar):
    requests, backend = sim_backend()
    run_engine(requests, backend.scheduler, WallNamed(backend.executor), progress=True)
    [made] = bar
    assert made.postfixes and all(s.startswith("tok/s=") and "sim" not in s for s in made.postfixes)


def test_no_bar_is_drawn_when_progress_is_off(bar):
    requests, backend = sim_backend()
    run_engine(requests, backend.scheduler, backend.executor, progress=False)
    [made] = bar
    assert made.disable and made.postfixes == []


def test_a_long_trace_is_built_behind_a_bar_shown_on_a_terminal(monkeypatch):
    made = []

    def recording_tqdm(items, **kwargs):
        made.append(kwargs)
        return items

    monkeypatch.setattr(trace_size, "tqdm", recording_tqdm)
    monkeypatch.setattr(trace_size, "PROGRESS_MIN_REQUESTS", 50)   # "long" from 50 requests on
    build_workload(WorkloadConfig(name="synthetic", num_requests=20))
    build_workload(WorkloadConfig(name="synthetic", num_requests=60))
    assert [(k["total"], k["disable"]) for k in made] == [(20, True), (60, None)]   # None: on a terminal only
