"""The search worker (``pion.server.search_pool``): jobs run off the loop thread (more threads
start while the first are busy), each answer comes back on the loop that posted it, errors
included, and the loop is woken once for a run of results rather than once per job."""

from __future__ import annotations

import asyncio
import threading
import time

from pion.server import search_pool
from pion.server.search_pool import SearchWorker


def test_jobs_run_in_the_worker_thread_and_answer_on_the_loop_in_order():
    worker = SearchWorker()
    gate = threading.Event()

    async def main():
        loop_thread = threading.get_ident()
        answers: list = []
        finished = asyncio.Event()

        def job(i):
            def run():
                gate.wait(10)  # every job is queued before the first runs
                if i == 3:
                    raise ValueError("bad job")
                return i, threading.get_ident()
            return run

        def done_for(i):
            def done(result, error):
                answers.append((i, result, error, threading.get_ident()))
                if len(answers) == 6:
                    finished.set()
            return done

        for i in range(6):
            worker.post(job(i), done_for(i))
        assert worker._inbox().in_flight == 6
        gate.set()
        time.sleep(0.3)  # the loop is busy while all six finish: one wake-up answers them all
        await asyncio.wait_for(finished.wait(), 10)
        answers.sort()
        assert [result[0] if result else None for _, result, _, _ in answers] == [0, 1, 2, None, 4, 5]
        assert isinstance(answers[3][2], ValueError) and answers[3][1] is None
        assert all(thread == loop_thread for _, _, _, thread in answers)  # answered on the loop
        ran = {result[1] for _, result, _, _ in answers if result}
        started = min(search_pool.WORKERS, 6)  # one more thread per job that found the others busy
        assert len(worker._threads) == started
        assert loop_thread not in ran and 1 <= len(ran) <= started  # run in the worker threads
        assert worker._inbox().in_flight == 0
        assert worker.stats["jobs"] == 6
        assert worker.stats["wakeups"] == worker.stats["deliveries"] == 1

    asyncio.run(main())


def test_offload_only_when_other_clients_query_meanwhile():
    worker = SearchWorker()

    async def main():
        assert not worker.should_offload(1)  # a lone client: inline
        assert not worker.should_offload(1)
        assert worker.should_offload(2)  # another client just queried
        worker.post(lambda: None, lambda result, error: None)
        assert worker.should_offload(2)  # one is in flight
        await asyncio.sleep(0.05)
        assert worker._inbox().in_flight == 0
        assert not worker.should_offload(2)  # nothing in flight, and the last query was its own
        await asyncio.sleep(0.01)  # another client's, but too long ago
        assert not worker.should_offload(1)

    asyncio.run(main())
