"""What a saved benchmark run records about the machine beside pytest-benchmark's own fields: torch's
version, its CPU thread count (`make bench` sets it, BENCH_THREADS) and the CUDA device, so that comparing
with a baseline taken under other settings warns ("machine_info is different")."""
import torch


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["torch"] = torch.__version__
    machine_info["torch_threads"] = torch.get_num_threads()
    machine_info["cuda_device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
