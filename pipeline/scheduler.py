"""The one owner of the models: sessions submit model work here and await it.

All model calls run one at a time on a single worker thread (torch and CTranslate2 already use
every core for one call). Sessions are served round-robin: each session has its own FIFO, and the
dispatcher takes one job from each waiting session in turn, so a client that floods work cannot
starve the others.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
from typing import Any, Callable, TypeVar

from specscribe.models.engines import Transcriber

T = TypeVar("T")
Job = tuple[Callable[[Transcriber], Any], asyncio.Future]


class ModelScheduler:
    """Round-robin, single-worker executor of model calls. Create and use it inside one event loop."""

    def __init__(self, transcriber: Transcriber) -> None:
        self.transcriber = transcriber
        self._queues: dict[str, collections.deque[Job]] = {}
        self._ready: collections.deque[str] = collections.deque()  # sessions with queued jobs, in turn order
        self._wakeup = asyncio.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self._task: asyncio.Task | None = None
        self.jobs_done = 0

    async def run(self, session_id: str, fn: Callable[[Transcriber], T]) -> T:
        """Run fn(transcriber) on the model thread, in this session's turn; returns its result."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._dispatch())
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        queue = self._queues.setdefault(session_id, collections.deque())
        if not queue:
            self._ready.append(session_id)
        queue.append((fn, future))
        self._wakeup.set()
        return await future

    def forget(self, session_id: str) -> None:
        """Drop a closed session's queued jobs (their awaiters get CancelledError)."""
        for _, future in self._queues.pop(session_id, ()):
            future.cancel()
        if session_id in self._ready:
            self._ready.remove(session_id)

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._ready:
                self._wakeup.clear()
                await self._wakeup.wait()
            session_id = self._ready.popleft()
            queue = self._queues.get(session_id)
            if not queue:
                continue
            fn, future = queue.popleft()
            if queue:
                self._ready.append(session_id)  # back of the line: others go first
            else:
                self._queues.pop(session_id, None)
            if future.cancelled():
                continue
            try:
                result = await loop.run_in_executor(self._pool, fn, self.transcriber)
            except Exception as exc:  # delivered to the session that asked
                if not future.cancelled():
                    future.set_exception(exc)
            else:
                if not future.cancelled():
                    future.set_result(result)
            self.jobs_done += 1

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self._pool.shutdown(wait=False, cancel_futures=True)
