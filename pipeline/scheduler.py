"""The one owner of the models: sessions submit model work here and await it.

A job is ``fn(transcriber)``. It is either a plain call (its return value is the job's result)
or a *program*: a generator that does its own encoding and alignment and ``yield``s a
``DecodeCall`` whenever it needs a decode, receiving the WindowResult back (the same contract as
the lanes of pipeline/lanes.py). The decodes of all running programs go to one ``DecodeLoop``,
so every session's re-decode rides in the same target passes; with the spec engine's
batch-invariant passes each decode is bitwise what it would be alone.

All model work runs on one model thread, in a loop of its own (it never waits for the event
loop): start jobs, one decode step, resume the programs whose decode finished, again.

- Starting: one waiting job starts before each decode step (its encode, then its decode joins
  the running ones), while fewer than ``width`` decodes run. So a long decode never holds back
  another session's job, and a decode is never held back by more than one encode per step.
  Encodes run one by one: a window encoded in a batch differs from the same window encoded alone
  (bf16), which would make a session's text depend on its companions; on the EPYC batching gained
  nothing anyway, on AMX 28-34 % a window (docs/benchmarks.md).
- Order: by priority (FINAL, then UPDATE, then BACKGROUND), round-robin between sessions within
  a priority, so that no session waits behind another's stream of jobs. A BACKGROUND job
  (translation, REST upload) that has waited ``background_wait`` seconds ranks as an UPDATE.
- Load: the turnaround of caption jobs (submitted to done) feeds pipeline/load.py's lag; sessions
  read ``load``.
- Withdrawal: a session takes back an update that has not started once newer audio waits behind
  it (``withdraw``; web/listen.py): that audio may end the utterance, and its final must not queue
  behind a stale update. Under load, partials thus go to the sessions whose updates start quickly.
  Once the newer audio is known to end the utterance (pipeline/session.py ``lookahead``), a running
  update is recalled too: its decode leaves the pass at the next step.
- Idle work: with ``--adapt-draft`` (models/adapt.py) the engine's draft adapter runs one short
  unit of training at a time, and only while no job runs or waits; a job that arrives meanwhile
  waits for that unit at most (AdaptStats.longest_unit_ms).
- Threads: the model thread is the only one that runs torch. The thread that starts it (the event
  loop's) releases its own OpenMP pool first, left there by a model load or a decode before the
  scheduler: with two pools on a 2-core machine libgomp stops spin-waiting and every kernel of the
  model thread waits for a wake-up (models/openmp.py; passes took twice as long).
- Memory: once the model has been idle for ``idle_trim_s``, freed heap memory goes back to the OS
  (pipeline/memory.py), so a server's RSS does not creep up with allocator fragmentation.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import inspect
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, TypeVar

from specscribe.models.engines import SequentialDecodeLoop, Transcriber
from specscribe.models.openmp import release_openmp_pool
from specscribe.pipeline.lanes import DecodeCall
from specscribe.pipeline.load import LagMeter, Load, LoadPolicy
from specscribe.pipeline.memory import release_free_memory

log = logging.getLogger(__name__)
T = TypeVar("T")
Program = Generator[DecodeCall, Any, T]


class _Withdrawn:
    def __repr__(self) -> str:
        return "WITHDRAWN"


WITHDRAWN = _Withdrawn()  # what ``run`` returns for a job taken back by ``withdraw`` before it started


class Priority(enum.IntEnum):
    FINAL = 0  # an utterance's last decode: commits its text
    UPDATE = 1  # a mid-utterance update: partials and early finals
    BACKGROUND = 2  # translations, REST uploads: they fill the gaps


@dataclass(frozen=True)
class SchedulerOptions:
    """Attributes: width (decodes sharing one target pass at most); background_wait (seconds after
    which a BACKGROUND job ranks as an UPDATE); load (the lag-to-level policy); idle_trim_s (idle
    seconds after which freed memory is given back to the OS; None: never)."""

    width: int = 16
    background_wait: float = 10.0
    load: LoadPolicy = field(default_factory=LoadPolicy)
    idle_trim_s: float | None = 1.0


@dataclass(eq=False)
class _Job:
    session_id: str
    fn: Callable[[Transcriber], Any]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    priority: Priority
    submitted: float
    program: Program | None = None
    model_s: float = 0.0  # its own work plus its share of the passes it rode in


def run_alone(transcriber: Transcriber, job: Callable[[Transcriber], Any]) -> Any:
    """Run a job outside any scheduler (tests, tools): its decodes one by one."""
    out = job(transcriber)
    if not inspect.isgenerator(out):
        return out
    try:
        call = next(out)
        while True:
            call = out.send(transcriber.decode(call.encoded, call.request))
    except StopIteration as stop:
        return stop.value


class ModelScheduler:
    """Priority, round-robin executor of model jobs on one model thread, decodes batched.

    Create it inside the event loop that will await its jobs; ``close`` it there.
    """

    def __init__(self, transcriber: Transcriber, options: SchedulerOptions = SchedulerOptions(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        if options.width < 1:
            raise ValueError(f"width must be >= 1, got {options.width}")
        self.transcriber, self.options, self._clock = transcriber, options, clock
        self._cond = threading.Condition()
        # per (session, priority), in turn order: a session's translation never blocks its own updates
        self._waiting: collections.OrderedDict[tuple[str, Priority], collections.deque[_Job]] = collections.OrderedDict()
        self._forgotten: set[str] = set()
        self._recalled: set[tuple[str, Priority]] = set()  # (session, priority) whose running jobs stop
        self._closed = False
        self._meter = LagMeter(options.load)
        self._model_s: dict[str, float] = {}  # per open session, on the event loop's side
        self._thread: threading.Thread | None = None
        self._adapter = getattr(transcriber, "adapter", None)  # --adapt-draft's idle-time trainer
        self._outstanding = 0  # caption jobs (UPDATE, FINAL) submitted and not yet returned (event loop side)
        self.jobs_done = 0
        self.steps = 0  # decode steps (target passes shared by the running decodes)
        self.shared_steps = 0  # steps that carried more than one decode
        self.decodes = 0  # decodes those steps finished
        self.memory_trims = 0  # idle spells that gave freed memory back

    # ---- event-loop side ------------------------------------------------------------------

    async def run(self, session_id: str, fn: Callable[[Transcriber], T | Program],
                  priority: Priority = Priority.UPDATE) -> T:
        """Run fn(transcriber) (a plain call or a program) on the model thread; returns its result."""
        loop = asyncio.get_running_loop()
        job = _Job(session_id, fn, loop.create_future(), loop, Priority(priority), self._clock())
        with self._cond:
            if self._closed:
                raise RuntimeError("the model scheduler is closed")
            self._forgotten.discard(session_id)
            self._model_s.setdefault(session_id, 0.0)
            self._waiting.setdefault((session_id, job.priority), collections.deque()).append(job)
            if self._thread is None:
                release_openmp_pool()  # this thread leaves torch to the model thread (module doc)
                self._thread = threading.Thread(target=self._work, name="model", daemon=True)
                self._thread.start()
            self._cond.notify()
        caption = job.priority < Priority.BACKGROUND
        self._outstanding += caption
        try:
            return await job.future
        finally:
            self._outstanding -= caption
            if session_id in self._model_s:  # not forgotten meanwhile; a job that raised used the model too
                self._model_s[session_id] += job.model_s

    @property
    def load(self) -> Load:
        """The current load (pipeline/load.py): the smoothed turnaround of caption jobs, or the wait of the
        oldest caption job still waiting if that is longer (a burst of jobs shows at once, not only as
        they finish); no lag while no caption job is waiting or running (background work alone, a translation or
        a REST upload, keeps the lag the last caption job left otherwise: busy for new sessions, for nothing)."""
        if not self._outstanding:
            return Load()
        with self._cond:
            oldest = min((q[0].submitted for q in self._waiting.values() if q[0].priority < Priority.BACKGROUND),
                         default=None)
        return self._meter.load(0.0 if oldest is None else self._clock() - oldest)

    @property
    def sessions_held(self) -> int:
        """Sessions the scheduler keeps state for (until ``forget``): a leak check for callers."""
        return len(self._model_s)

    def model_seconds(self, session_id: str) -> float:
        """Model time spent on a session's jobs so far (its own work plus its share of passes)."""
        return self._model_s.get(session_id, 0.0)

    def withdraw(self, session_id: str, priority: Priority = Priority.UPDATE, running: bool = False) -> int:
        """Take back a session's jobs of this priority that have not started: their ``run`` returns
        WITHDRAWN at once, and the model never spends a moment on them. With running, the ones
        running now are recalled too: the model thread stops them before its next step (a decode
        leaves the pass, a program is closed) and their ``run`` returns WITHDRAWN. Returns how many
        waiting jobs were taken back."""
        with self._cond:
            jobs = self._waiting.pop((session_id, Priority(priority)), ())
            if running:
                self._recalled.add((session_id, Priority(priority)))
                self._cond.notify()
        now = self._clock()
        for job in jobs:
            if job.priority < Priority.BACKGROUND:
                self._meter.observe(now - job.submitted)  # waited this long and never ran: load all the same
            _settle(job, value=WITHDRAWN)
        return len(jobs)

    def forget(self, session_id: str) -> None:
        """Drop a closed session: its waiting jobs are cancelled, its running decodes stopped."""
        with self._cond:
            for key in [k for k in self._waiting if k[0] == session_id]:
                for job in self._waiting.pop(key):
                    job.future.cancel()
            self._forgotten.add(session_id)
            self._cond.notify()
        self._model_s.pop(session_id, None)

    async def close(self) -> None:
        with self._cond:
            self._closed = True
            for jobs in self._waiting.values():
                for job in jobs:
                    job.future.cancel()
            self._waiting.clear()
            self._cond.notify()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
            self._thread = None

    # ---- model thread ---------------------------------------------------------------------

    def _work(self) -> None:
        running: dict[int, _Job] = {}  # by decode tag
        try:
            self._serve(running)
        except BaseException:  # a scheduler fault: nobody may wait forever
            log.exception("the model thread failed; model jobs fail from now on")
            with self._cond:
                self._closed = True
                jobs = [*running.values(), *(job for queue in self._waiting.values() for job in queue)]
                self._waiting.clear()
            for job in jobs:
                _settle(job, error=RuntimeError("the model scheduler failed"))

    def _serve(self, running: dict[int, _Job]) -> None:
        decodes = self._decode_loop()
        tags = iter(range(1 << 62))
        trimmed = True  # nothing freed yet
        while True:
            with self._cond:
                idle = self._wait_for_work(running, trim_after=None if trimmed else self.options.idle_trim_s)
                if self._closed:
                    break
                if idle is None:
                    self._drop_forgotten(decodes, running)
                    finals = any(job.priority == Priority.FINAL for job in running.values())
                    starts = self._pick(min(1, self.options.width - len(running)), finals_only=finals)
            if idle == "adapt":  # outside the lock; one short unit, then look for jobs again
                self._adapt()
                trimmed = False
                continue
            if idle == "trim":  # outside the lock: sessions can submit meanwhile
                started = time.perf_counter()
                release_free_memory()
                self.memory_trims += 1
                log.debug("idle: freed memory given back in %.1f ms", (time.perf_counter() - started) * 1e3)
                trimmed = True
                continue
            trimmed = False
            for job in starts:
                self._advance(job, None, next(tags), decodes, running)
            if running:
                started = time.perf_counter()
                try:
                    finished = decodes.step()
                except Exception as exc:  # an engine fault: every running job gets it, the loop starts afresh
                    for job in running.values():
                        _settle(job, error=exc)
                    running.clear()
                    decodes = self._decode_loop()
                    continue
                share = (time.perf_counter() - started) / len(running)
                for job in running.values():
                    job.model_s += share
                self.steps += 1
                self.shared_steps += len(running) > 1
                for tag, result in finished:
                    job = running.pop(tag, None)
                    if job is not None:
                        self.decodes += 1
                        self._advance(job, result, tag, decodes, running)
        for tag, job in running.items():
            decodes.cancel(tag)
            _settle(job, cancel=True)

    def _wait_for_work(self, running: dict[int, _Job], trim_after: float | None) -> str | None:
        """Wait (caller holds the lock) until there is work or the scheduler closes (None), or idle
        work is due: "adapt" when the draft adapter has a unit to run, "trim" when the model has
        been idle for trim_after seconds (None: wait for work however long)."""
        while not self._closed and not running and not self._waiting:
            if self._adapter is not None and self._adapter.pending():
                return "adapt"
            self._meter.reset()  # idle: the next busy spell starts without lag
            if not self._cond.wait(trim_after) and trim_after is not None:
                return "trim"
        return None

    def _adapt(self) -> None:
        try:
            self._adapter.work()
        except Exception:  # adaptation only ever costs speed: a fault turns it off, serving goes on
            log.exception("draft adaptation failed; it is off from now on")
            self._adapter = None

    def _decode_loop(self) -> Any:
        make = getattr(self.transcriber, "decode_loop", None)  # engines without one decode one by one
        return make() if make is not None else SequentialDecodeLoop(self.transcriber)

    def _pick(self, room: int, finals_only: bool = False) -> list[_Job]:
        """Take up to room waiting jobs, best priority first, sessions in turn (caller holds the lock).
        finals_only (a final's decode is running): other jobs wait, unless one has waited background_wait."""
        picked: list[_Job] = []
        now = self._clock()
        while len(picked) < room and self._waiting:
            best: tuple[str, Priority] | None = None
            for key, jobs in self._waiting.items():  # in turn order: first best wins
                held = jobs[0].priority != Priority.FINAL and now - jobs[0].submitted < self.options.background_wait
                if finals_only and held:
                    continue
                if best is None or self._rank(jobs[0], now) < self._rank(self._waiting[best][0], now):
                    best = key
            if best is None:
                break
            jobs = self._waiting[best]
            picked.append(jobs.popleft())
            del self._waiting[best]
            if jobs:
                self._waiting[best] = jobs  # back of the line
        return [job for job in picked if not job.future.cancelled()]

    def _rank(self, job: _Job, now: float) -> int:
        if job.priority == Priority.BACKGROUND and now - job.submitted >= self.options.background_wait:
            return Priority.UPDATE
        return job.priority

    def _drop_forgotten(self, decodes, running: dict[int, _Job]) -> None:
        """Stop the running jobs of forgotten sessions (cancelled) and recalled ones (WITHDRAWN)."""
        for tag, job in list(running.items()):
            forgotten = job.session_id in self._forgotten or job.future.cancelled()
            if forgotten or (job.session_id, job.priority) in self._recalled:
                decodes.cancel(tag)
                del running[tag]
                if job.program is not None:
                    try:
                        job.program.close()
                    except Exception:  # its cleanup failed: the job is over all the same, for its session alone
                        log.exception("session %s: a recalled job failed to close", job.session_id)
                if forgotten:
                    _settle(job, cancel=True)
                else:
                    self._finish(job, time.perf_counter(), value=WITHDRAWN)
        self._forgotten.clear()
        self._recalled.clear()

    def _advance(self, job: _Job, result: Any, tag: int, decodes, running: dict[int, _Job]) -> None:
        """Start a job (result None) or resume its program with a decode's result."""
        started = time.perf_counter()
        try:
            if job.program is None:
                out = job.fn(self.transcriber)
                if not inspect.isgenerator(out):
                    return self._finish(job, started, value=out)
                job.program = out
                call = next(out)
            elif isinstance(result, Exception):  # its decode failed (DecodeLoop.step): delivered below
                call = job.program.throw(result)
            else:
                call = job.program.send(result)
            decodes.submit(tag, call.encoded, call.request)
            running[tag] = job
            job.model_s += time.perf_counter() - started
        except StopIteration as stop:
            self._finish(job, started, value=stop.value)
        except Exception as exc:  # delivered to the session that asked
            self._finish(job, started, error=exc)
        except BaseException as exc:  # delivered too, then the model thread's fault handler fails the rest
            self._finish(job, started, error=exc)
            raise

    def _finish(self, job: _Job, started: float, value: Any = None, error: BaseException | None = None) -> None:
        job.model_s += time.perf_counter() - started
        if job.priority < Priority.BACKGROUND:
            self._meter.observe(self._clock() - job.submitted)  # its turnaround: waiting + its own work
        self.jobs_done += 1
        _settle(job, value=value, error=error)


def _settle(job: _Job, value: Any = None, error: BaseException | None = None, cancel: bool = False) -> None:
    """Deliver a job's outcome to its awaiter, on the awaiter's event loop."""

    def deliver() -> None:
        if job.future.done():
            return
        if cancel:
            job.future.cancel()
        elif error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(value)

    try:
        job.loop.call_soon_threadsafe(deliver)
    except RuntimeError:  # the awaiter's loop is closed: nobody waits any more
        pass
