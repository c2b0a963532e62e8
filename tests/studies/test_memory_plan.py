"""The GPU steps' memory plans (`--plan HARDWARE`): computed from presets alone, below the device's memory."""
from pagedbench.engines.specs.presets import load_hardware, load_model
from pagedbench.studies import kernel_bench, profile, swap_bench
from pagedbench.studies.memory_plan import (GIB, DeviceMemory, StepPlan, device_memory, kv_bytes_per_slot, kv_slot_cap,
                                 weight_bytes)

H200 = load_hardware("h200").memory_bytes


def test_the_profile_plan_for_opt_1_3b_fp16_fits_the_h200_and_names_its_parts():
    plan = profile.plan("opt-1.3b", "float16", "h200")
    spec = load_model("opt-1.3b")
    parts = dict(plan.parts)
    assert list(parts) == ["weights", "KV", "activations"]
    assert parts["weights"] == weight_bytes(spec, 2)
    slots = parts["KV"] // kv_bytes_per_slot(spec, 2)
    assert 64 * 1025 <= slots < 70_000              # the largest shape (64 x 1024) and a margin, not 131,072
    assert 0 < parts["activations"] < 4 * GIB
    assert plan.fits and plan.peak_bytes == sum(parts.values()) < 0.2 * H200


def test_the_profile_plan_flag_prints_one_line_and_exits_0(capsys):
    assert profile.main(["--model", "opt-1.3b", "--dtype", "float16", "--plan", "h200"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("profile: planned peak ") and f"of {H200 / GIB:.1f} GiB on h200 (weights 2.5, KV " in line


def test_a_profile_plan_that_does_not_fit_exits_2_and_says_why(capsys):
    assert profile.main(["--model", "opt-175b", "--dtype", "float16", "--plan", "h200"]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("profile: planned peak") and "exceeds the" in captured.err


def test_the_kernel_bench_plan_covers_the_gpu_grid(capsys):
    assert kernel_bench.main(["--plan", "h200", "--num-stages", "0", "2", "4"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("kernel_bench: planned peak ") and "(inputs " in line and "copy ceiling 4.0" in line
    assert "largest: batch 32 context 4096" in line   # the GPU's default grid, on any machine


def test_a_kernel_bench_case_too_large_for_the_device_fails_the_plan(capsys):
    assert kernel_bench.main(["--plan", "h200", "--batches", "8", "256", "--context-lens", "65536"]) == 2
    assert "batch 256 context 65536" in capsys.readouterr().err


def test_the_swap_bench_plan_counts_pinned_host_memory(capsys):
    assert swap_bench.main(["--model", "opt-1.3b", "--tokens", "2048", "--plan", "h200"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("swap_bench: planned peak ") and "device blocks" in line and "pinned host 1.5 GiB" in line
    assert swap_bench.main(["--model", "opt-175b", "--tokens", "2048", "--plan", "h200"]) == 2


def test_a_plan_fits_below_the_fraction_of_memory_the_context_leaves():
    device = DeviceMemory("toy", 10 * GIB)
    assert device_memory("h200").memory_bytes == H200
    assert StepPlan("s", device, (("a", device.limit_bytes),)).fits
    assert not StepPlan("s", device, (("a", device.limit_bytes + 1),)).fits
    assert not StepPlan("s", device, (("a", 1),), problem="a shape cannot fit").fits
    assert kv_slot_cap(free_bytes=10_000, bytes_per_slot=10, activations=1_000) == 800
    assert kv_slot_cap(free_bytes=1_000, bytes_per_slot=10, activations=5_000) == 0
