import pytest

from pagedbench.workloads.request import Request


class UnitExecutor:
    """Every iteration takes 1 s plus 1 ms per computed token: enough to order events in tests."""

    name = "unit"
    fast_forward = False

    def __init__(self):
        self.clock = 0.0

    def now(self):
        return self.clock

    def execute(self, batch):
        duration = 1.0 + 1e-3 * batch.num_tokens
        self.clock += duration
        return duration

    def wait_until(self, t):
        self.clock = max(self.clock, t)


def make_request(i, prompt_len, output_len, arrival_s=0.0):
    return Request(i, arrival_s, tuple(range(prompt_len)), output_len)


@pytest.fixture
def executor():
    return UnitExecutor()
