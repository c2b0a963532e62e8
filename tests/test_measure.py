"""pagedbench.measure: a whole process's wall time, CPU time and its own peak memory."""
import sys

import pytest

from pagedbench.measure import measure

MIB = 2**20


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_the_peak_is_the_commands_own_not_its_starters():
    # This process holds 400 MiB more, touched: a child that subprocess starts straight from here inherits that
    # high-water mark in its ru_maxrss; measured, a bare Python's peak is its own few MiB.
    held = bytearray(400 * MIB)
    held[::4096] = b"\1" * len(held[::4096])
    m = measure(python("pass"))
    assert m.returncode == 0
    assert m.peak_mib < 100
    del held


def test_a_command_that_holds_memory_shows_it():
    m = measure(python("b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096])"))
    assert m.returncode == 0
    assert 300 <= m.peak_mib < 400


def test_cpu_and_wall_time_are_the_commands():
    # busy until the child has used 0.3 s of CPU: at least that much of both, whatever the machine's load
    m = measure(python("import time\nwhile time.process_time() < 0.3: pass"))
    assert m.cpu_s >= 0.3 and m.wall_s >= 0.3


def test_exit_codes_and_signals_are_passed_on():
    assert measure(python("import sys; sys.exit(3)")).returncode == 3
    assert measure(python("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")).returncode == -15


def test_output_cwd_and_stdin(tmp_path):
    log = tmp_path / "log"
    with open(log, "w") as out:
        m = measure(python("import os, sys; print(os.getcwd()); print(repr(sys.stdin.read()))"), cwd=tmp_path,
                    stdout=out)
    assert m.returncode == 0
    assert log.read_text().splitlines() == [str(tmp_path), "''"]


def test_a_program_that_cannot_start_is_an_os_error():
    with pytest.raises(OSError) as error:
        measure(["no-such-program-here"])
    assert error.value.strerror
    with pytest.raises(ValueError):
        measure([])
