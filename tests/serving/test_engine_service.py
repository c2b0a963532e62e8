"""The engine service's lifecycle without HTTP, on the sim (no model): health before and after start, a stop
asked with and without the engine's own thread, waiting on it, and what it keeps; and, through the openai client,
that a backend with no logits refuses log-probabilities by name rather than invent them."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace
import threading
import time

import openai
import pytest
from starlette.testclient import TestClient

from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import PagedEngineConfig, SchedulerLimits
from pagedbench.engines.sequence import Status
from pagedbench.engines.serving.asgi_server import STOPPING, EngineService, Event, build_app
from pagedbench.engines.serving.openai_api import ParsedRequest
from tests.engines.conftest import UnitExecutor

LIMITS = SchedulerLimits(max_num_seqs=4, max_num_batched_tokens=256, max_seq_len=64)


class Executor(UnitExecutor):
    """The unit executor with the clock a server starts."""

    def warmup(self) -> None:
        pass

    def start_clock(self) -> None:
        pass


class SimBackend:
    """What the service reads of a backend: its scheduler and executor."""

    def __init__(self):
        self.scheduler = build_scheduler(PagedEngineConfig(block_size=8, watermark=0.0, swap_space=0), LIMITS, 160, 1)
        self.executor = Executor()


@pytest.fixture
def service():
    svc = EngineService(SimBackend(), "tiny", "paged", max_seq_len=64)
    yield svc
    svc.stop()


def test_a_new_service_keeps_no_record_and_is_not_healthy_until_started(service):
    assert service.record is None and service.healthy is False and service.engine_error is None
    assert service.model_id == "pagedbench-paged-tiny" and abs(service.created - time.time()) < 600
    kept = EngineService(SimBackend(), "tiny", "paged", keep_record=True)
    assert kept.record is not None and kept.record.capacity_slots == 160
    service.stop()                     # never started: nothing to join, no error
    assert service.healthy is False and service.unavailable() == STOPPING


def test_the_engine_runs_on_a_named_thread_until_stopped(service):
    service.start()
    assert service.healthy is True
    (engine,) = [t for t in threading.enumerate() if t.name == "pagedbench-engine"]
    assert engine is service._engine and engine.is_alive()
    started = time.monotonic()
    service.wait(0.05)                 # a bounded wait returns while the engine runs on
    assert time.monotonic() - started < 5 and engine.is_alive()
    service.stop()
    assert not engine.is_alive() and service.healthy is False


def test_a_stop_asked_from_a_signal_handler_turns_health_off_at_once(service):
    service.start(thread=False)        # the caller's thread would run the loop next (a server's main thread)
    assert service.healthy is True
    service.request_stop()
    assert service.healthy is False
    service.run()                      # the loop sees the stop before its first step and returns
    assert service.engine_error is None


def test_waiting_on_a_stop_asked_by_a_signal_returns_once_the_engine_ended(service):
    service.start()
    service.request_stop()
    service.wait(10)
    assert not service._engine.is_alive()


def test_a_stop_without_the_engine_s_own_thread_turns_health_off(service):
    service.start(thread=False)
    service.stop()
    assert service.healthy is False


def test_a_request_submitted_to_a_stopped_service_hears_why_at_once(service):
    async def submit():
        return service.submit(ParsedRequest(False, [1, 2], 3))

    _, stream = asyncio.run(submit())
    assert stream.queue.get_nowait() == Event("error", message=STOPPING) and stream.queue.empty()
    assert service._streams == {} and service.inbox.take(0) == []


def test_late_word_of_a_request_whose_client_left_is_ignored(service):
    """A static batch runs an aborted member to its end: its tokens and its end come after its stream is gone;
    an abort of a request that already ended counts nothing."""
    gone = SimpleNamespace(id=7, status=Status.FINISHED, rejected_reason=None, output_token_ids=[1])
    service._on_tokens(gone, [1])
    service._on_done(gone)
    service.abort(7)
    assert service._aborted == []
    assert 'finished_reason="abort"' not in service.metrics.text()[0].decode()


@pytest.mark.parametrize("chat, kwargs, param", [
    (False, dict(logprobs=1), "logprobs"),
    (False, dict(logprobs=0), "logprobs"),
    (False, dict(n=1, best_of=2), "best_of"),     # ranked by logprobs, which this backend cannot compute
    (True, dict(logprobs=True), "logprobs"),
    (True, dict(logprobs=True, top_logprobs=2), "logprobs"),
])
def test_a_backend_without_logits_refuses_logprobs_by_name(service, chat, kwargs, param):
    service.start()
    http = TestClient(build_app(service))        # not entered: the service is started here, not by the lifespan
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        if chat:
            client.chat.completions.create(model=service.model_id, messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=2, temperature=0, **kwargs)
        else:
            client.completions.create(model=service.model_id, prompt=[1, 2, 3], max_tokens=2, temperature=0,
                                      **kwargs)
    assert caught.value.body["param"] == param and caught.value.body["code"] == "unsupported_logprobs"
