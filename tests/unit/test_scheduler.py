"""The model scheduler with a fake engine: shared passes, priority, fairness, join and leave, load."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from specscribe.models.types import DecodeRequest, EncodedAudio
from specscribe.pipeline.lanes import DecodeCall
from specscribe.pipeline.load import LagMeter, Load, LoadPolicy
from specscribe.pipeline.scheduler import WITHDRAWN, ModelScheduler, Priority, SchedulerOptions, run_alone


class FakeLoop:
    """A DecodeLoop whose decode of `max_new_tokens` n takes n steps; records every step's tags."""

    def __init__(self, engine: "FakeEngine"):
        self.engine = engine
        self.left: dict = {}

    def submit(self, tag, encoded, request):
        self.left[tag] = (encoded, request.max_new_tokens)

    def step(self):
        self.engine.steps.append(sorted(self.left))
        self.engine.step_names.append(sorted(enc.handle for enc, _ in self.left.values()))
        done = []
        for tag, (enc, n) in list(self.left.items()):
            if n <= 1:
                del self.left[tag]
                done.append((tag, f"decoded {enc.handle}"))
            else:
                self.left[tag] = (enc, n - 1)
        return done

    def cancel(self, tag):
        self.left.pop(tag, None)

    def __len__(self):
        return len(self.left)


class FakeEngine:
    name = "fake"

    def __init__(self):
        self.started: list[str] = []  # job names, in the order their encode ran
        self.steps: list[list] = []
        self.step_names: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()

    def decode_loop(self):
        return FakeLoop(self)

    def encode(self, name):
        self.gate.wait(10)
        self.started.append(name)
        return EncodedAudio(1.0, name)


def job(name: str, steps: int = 3):
    """A program: encode, one decode of `steps` steps, return the decode's result."""

    def program(engine: FakeEngine):
        encoded = engine.encode(name)
        result = yield DecodeCall(encoded, DecodeRequest(max_new_tokens=steps))
        return result

    return program


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_decodes_of_many_sessions_share_steps():
    engine = FakeEngine()

    async def main():
        scheduler = ModelScheduler(engine)
        engine.gate.clear()  # hold the model thread until all four are queued
        tasks = [asyncio.create_task(scheduler.run(s, job(s, steps=6))) for s in "abcd"]
        await asyncio.sleep(0.05)
        engine.gate.set()
        results = await asyncio.gather(*tasks)
        await scheduler.close()
        return results, scheduler

    results, scheduler = run(main())
    assert results == [f"decoded {s}" for s in "abcd"]
    assert max(len(step) for step in engine.steps) == 4  # all four in one pass
    assert scheduler.steps < 4 * 6  # alone, they would need 24 steps
    assert scheduler.decodes == 4 and scheduler.jobs_done == 4


def test_withdraw_takes_back_waiting_updates_only():
    engine = FakeEngine()

    async def main():
        scheduler = ModelScheduler(engine, SchedulerOptions(width=1, load=LoadPolicy(smoothing=1.0)))
        engine.gate.clear()
        running = asyncio.create_task(scheduler.run("a", job("a-update", 1), Priority.UPDATE))
        await asyncio.sleep(0.05)  # a-update holds the model thread at its encode: it has started
        waiting = asyncio.create_task(scheduler.run("a", job("a-update2", 1), Priority.UPDATE))
        final = asyncio.create_task(scheduler.run("a", job("a-final", 1), Priority.FINAL))
        other = asyncio.create_task(scheduler.run("b", job("b-update", 1), Priority.UPDATE))
        await asyncio.sleep(0.05)
        taken = scheduler.withdraw("a", Priority.UPDATE)
        withdrawn = await waiting  # returns at once, the model thread still held
        lag = scheduler.load.lag_s
        again = scheduler.withdraw("a", Priority.UPDATE)  # nothing left to take
        engine.gate.set()
        results = await asyncio.gather(running, final, other)
        await scheduler.close()
        return taken, withdrawn, lag, again, results

    taken, withdrawn, lag, again, results = run(main())
    assert taken == 1 and again == 0
    assert withdrawn is WITHDRAWN
    assert lag > 0  # its wait counts as load
    assert results == ["decoded a-update", "decoded a-final", "decoded b-update"]
    assert "a-update2" not in engine.started  # the model never ran it
    assert engine.started == ["a-update", "a-final", "b-update"]


def test_withdraw_with_running_recalls_a_running_update_and_nothing_else():
    engine = FakeEngine()

    async def main():
        scheduler = ModelScheduler(engine)
        update = asyncio.create_task(scheduler.run("a", job("a-update", steps=10**9), Priority.UPDATE))
        other = asyncio.create_task(scheduler.run("b", job("b-update", steps=10**9), Priority.UPDATE))
        while len(engine.steps) < 3 or len(engine.steps[-1]) < 2:  # both decoding
            await asyncio.sleep(0.001)
        assert scheduler.withdraw("a", Priority.UPDATE, running=True) == 0  # none was waiting
        at = len(engine.steps)  # counted after the recall: the model thread steps on meanwhile
        recalled = await update
        final = await scheduler.run("a", job("a-final", steps=2), Priority.FINAL)
        scheduler.forget("b")
        with pytest.raises(asyncio.CancelledError):
            await other
        await scheduler.close()
        return recalled, final, at

    recalled, final, at = run(main())
    assert recalled is WITHDRAWN
    assert final == "decoded a-final"  # the session's next job runs as usual
    later = engine.step_names[at + 1 :]  # a step may have been under way when the recall came
    assert later and all("a-update" not in names and "b-update" in names for names in later)


@pytest.mark.parametrize("background_wait", [10.0, 0.0])
def test_while_a_final_decodes_other_jobs_wait(background_wait):
    """Finals first: no update starts while a final's decode runs (each start would slow every running decode
    by its encode), unless it has waited background_wait."""
    engine = FakeEngine()

    async def main():
        scheduler = ModelScheduler(engine, SchedulerOptions(width=4, background_wait=background_wait))
        engine.gate.clear()
        tasks = [asyncio.create_task(scheduler.run("a", job("a-final", 6), Priority.FINAL))]
        await asyncio.sleep(0.05)  # a-final holds the model thread at its encode
        tasks += [asyncio.create_task(scheduler.run("b", job("b-update", 2), Priority.UPDATE)),
                  asyncio.create_task(scheduler.run("c", job("c-final", 3), Priority.FINAL))]
        await asyncio.sleep(0.05)
        engine.gate.set()
        await asyncio.gather(*tasks)
        await scheduler.close()

    run(main())
    assert engine.started[:2] == ["a-final", "c-final"]
    shared = any("b-update" in names and len(names) > 1 for names in engine.step_names)
    assert shared == (background_wait == 0.0)  # waited its turn: it rode along with the finals


def test_load_counts_the_oldest_waiting_job_before_any_finishes():
    engine = FakeEngine()

    async def main():
        now = [0.0]
        scheduler = ModelScheduler(engine, SchedulerOptions(width=1, load=LoadPolicy(thresholds=(0.5, 1.0, 2.0))),
                                   clock=lambda: now[0])
        engine.gate.clear()
        first = asyncio.create_task(scheduler.run("a", job("a", 1)))
        await asyncio.sleep(0.05)  # a holds the model thread; b waits behind it
        second = asyncio.create_task(scheduler.run("b", job("b", 1)))
        await asyncio.sleep(0.01)
        now[0] = 1.5
        during = scheduler.load
        engine.gate.set()
        await asyncio.gather(first, second)
        await scheduler.close()
        return during

    during = run(main())
    assert during.level == 2 and during.lag_s == pytest.approx(1.5)  # no job has finished yet


def test_priority_final_then_update_then_background_and_round_robin():
    engine = FakeEngine()

    async def main():
        scheduler = ModelScheduler(engine, SchedulerOptions(width=1))
        engine.gate.clear()
        first = asyncio.create_task(scheduler.run("z", job("z0", steps=1)))
        await asyncio.sleep(0.05)  # z0 holds the model thread at its encode
        tasks = [
            asyncio.create_task(scheduler.run("a", job("a-translate", 1), Priority.BACKGROUND)),
            asyncio.create_task(scheduler.run("b", job("b1", 1), Priority.UPDATE)),
            asyncio.create_task(scheduler.run("b", job("b2", 1), Priority.UPDATE)),
            asyncio.create_task(scheduler.run("c", job("c1", 1), Priority.UPDATE)),
            asyncio.create_task(scheduler.run("d", job("d-final", 1), Priority.FINAL)),
        ]
        await asyncio.sleep(0.05)
        engine.gate.set()
        await asyncio.gather(first, *tasks)
        await scheduler.close()

    run(main())
    # the final first, updates with sessions taking turns (b, c, b), the translation last
    assert engine.started == ["z0", "d-final", "b1", "c1", "b2", "a-translate"]


def test_background_job_is_not_starved():
    engine = FakeEngine()

    async def main():
        now = [0.0]
        scheduler = ModelScheduler(engine, SchedulerOptions(width=1, background_wait=5.0), clock=lambda: now[0])
        engine.gate.clear()
        first = asyncio.create_task(scheduler.run("z", job("z0", 1)))
        await asyncio.sleep(0.05)
        late = asyncio.create_task(scheduler.run("a", job("a-translate", 1), Priority.BACKGROUND))
        await asyncio.sleep(0.01)
        now[0] = 6.0  # the translation has waited past background_wait: it ranks as an update
        update = asyncio.create_task(scheduler.run("b", job("b1", 1), Priority.UPDATE))
        await asyncio.sleep(0.05)
        engine.gate.set()
        await asyncio.gather(first, late, update)
        await scheduler.close()

    run(main())
    assert engine.started == ["z0", "a-translate", "b1"]  # a was first in turn among equal ranks


def test_a_long_decode_does_not_hold_back_another_session():
    engine = FakeEngine()

    async def main():
        scheduler = ModelScheduler(engine)
        long = asyncio.create_task(scheduler.run("slow", job("slow", steps=10**9)))  # endless
        while "slow" not in engine.started:
            await asyncio.sleep(0.001)
        short = await scheduler.run("quick", job("quick", steps=2))
        assert not long.done()  # the quick job joined the slow one's passes and left first
        scheduler.forget("slow")
        with pytest.raises(asyncio.CancelledError):
            await long
        await scheduler.close()
        return short

    assert run(main()) == "decoded quick"
    joined = [i for i, names in enumerate(engine.step_names) if names == ["quick", "slow"]]
    assert len(joined) == 2  # its two steps rode in the slow decode's passes


def test_forget_cancels_waiting_and_running_jobs_and_others_go_on():
    engine = FakeEngine()

    async def main():
        scheduler = ModelScheduler(engine, SchedulerOptions(width=1))  # gone2 waits for room
        gone = asyncio.create_task(scheduler.run("gone", job("gone", steps=10**9)))
        while "gone" not in engine.started:
            await asyncio.sleep(0.001)
        queued = asyncio.create_task(scheduler.run("gone", job("gone2", steps=1)))
        await asyncio.sleep(0.01)
        scheduler.forget("gone")
        with pytest.raises(asyncio.CancelledError):
            await gone
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert await scheduler.run("stay", job("stay", 2)) == "decoded stay"
        await scheduler.close()

    run(main())
    assert "gone2" not in engine.started
    assert engine.steps[-1] == engine.steps[-2] and len(engine.steps[-1]) == 1  # only "stay" left


def test_errors_reach_only_their_session():
    engine = FakeEngine()

    def broken(_engine):
        raise ValueError("bad window")
        yield  # a program

    async def main():
        scheduler = ModelScheduler(engine)
        with pytest.raises(ValueError, match="bad window"):
            await scheduler.run("a", broken)
        assert await scheduler.run("b", job("b", 2)) == "decoded b"
        assert await scheduler.run("c", lambda e: 42) == 42  # a plain call
        await scheduler.close()

    run(main())


def test_a_failing_decode_step_fails_its_jobs_and_the_loop_recovers():
    class Boom(FakeEngine):
        loops = 0

        def decode_loop(self):
            Boom.loops += 1
            loop = FakeLoop(self)
            if Boom.loops == 1:
                loop.step = lambda: (_ for _ in ()).throw(RuntimeError("engine fault"))
            return loop

    engine = Boom()

    async def main():
        scheduler = ModelScheduler(engine)
        with pytest.raises(RuntimeError, match="engine fault"):
            await scheduler.run("a", job("a", 2))
        assert await scheduler.run("a", job("a2", 2)) == "decoded a2"
        await scheduler.close()

    run(main())


def test_a_decode_that_fails_alone_fails_only_its_job():
    """A decode loop reports one decode's own failure as its result (SequentialDecodeLoop: the ct2 engine, the
    REST API); it is thrown into that job's program, and the job beside it in the same loop still finishes."""
    class OneBad(FakeLoop):
        def step(self):
            return [(tag, RuntimeError("bad window") if result == "decoded a" else result)
                    for tag, result in super().step()]

    engine = FakeEngine()
    engine.decode_loop = lambda: OneBad(engine)

    async def main():
        scheduler = ModelScheduler(engine)
        bad = asyncio.ensure_future(scheduler.run("a", job("a", 2)))
        good = asyncio.ensure_future(scheduler.run("b", job("b", 3)))
        assert await good == "decoded b"
        with pytest.raises(RuntimeError, match="bad window"):
            await bad
        await scheduler.close()

    run(main())


def test_model_seconds_are_counted_per_session():
    engine = FakeEngine()

    async def main():
        scheduler = ModelScheduler(engine)
        await scheduler.run("a", job("a", 3))
        used = scheduler.model_seconds("a")
        assert scheduler.sessions_held == 1
        scheduler.forget("a")
        assert scheduler.sessions_held == 0
        return used, scheduler.model_seconds("a")

    used, after = run(main())
    assert used > 0 and after == 0.0


def test_run_alone_decodes_a_program_without_a_scheduler():
    class Direct(FakeEngine):
        def decode(self, encoded, request):
            return f"alone {encoded.handle} {request.max_new_tokens}"

    assert run_alone(Direct(), job("x", 5)) == "alone x 5"
    assert run_alone(Direct(), lambda e: "plain") == "plain"


def test_load_levels_follow_the_lag():
    policy = LoadPolicy(thresholds=(0.5, 1.0, 2.5), smoothing=1.0)
    meter = LagMeter(policy)
    levels = []
    for wait in (0.1, 0.6, 1.2, 3.0, 0.2):
        meter.observe(wait)
        levels.append(meter.load().level)
    assert levels == [0, 1, 2, 3, 0]
    busy = Load(3, 3.0)
    assert busy.update_factor == 8 and not busy.accepting and not busy.translate_early and not busy.keep_context
    assert Load().accepting and Load().translate_early and Load().update_factor == 1 and Load().keep_context
    assert Load(1).keep_context and not Load(2).keep_context


def test_lag_is_smoothed_and_reset_when_idle():
    meter = LagMeter(LoadPolicy(smoothing=0.5))
    meter.observe(4.0)
    assert meter.lag == pytest.approx(2.0)
    meter.observe(0.0)
    assert meter.lag == pytest.approx(1.0)
    meter.reset()
    assert meter.load() == Load()


def test_scheduler_reports_load_from_caption_job_turnaround():
    engine = FakeEngine()

    async def main():
        now = [0.0]
        scheduler = ModelScheduler(engine, SchedulerOptions(width=1, load=LoadPolicy(smoothing=1.0)), clock=lambda: now[0])
        engine.gate.clear()
        first = asyncio.create_task(scheduler.run("a", job("a", 1)))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(scheduler.run("b", lambda e: scheduler.load))  # as it starts
        await asyncio.sleep(0.01)
        now[0] = 4.0  # a's result comes 4 s after it was submitted; b starts after it
        engine.gate.set()
        load = await second
        await first
        await scheduler.close()
        return load, scheduler.load

    during, after = run(main())
    assert during.level == 3 and during.lag_s == pytest.approx(4.0)
    assert after == Load()  # idle again: no lag


def test_freed_memory_goes_back_once_per_idle_spell():
    async def main():
        engine = FakeEngine()
        engine.gate.clear()  # the first job's encode waits: the model is busy
        scheduler = ModelScheduler(engine, SchedulerOptions(idle_trim_s=0.05))
        first = asyncio.ensure_future(scheduler.run("a", job("a1")))
        await asyncio.sleep(0.3)
        assert scheduler.memory_trims == 0  # not while a job runs
        engine.gate.set()
        await first
        await asyncio.sleep(0.5)
        assert scheduler.memory_trims == 1  # idle long enough
        await asyncio.sleep(0.3)
        assert scheduler.memory_trims == 1  # once per idle spell, however long it lasts
        await scheduler.run("a", job("a2"))
        await asyncio.sleep(0.5)
        assert scheduler.memory_trims == 2
        await scheduler.close()

    run(main())


def test_release_free_memory_runs_on_glibc():
    import platform

    from specscribe.pipeline.memory import release_free_memory

    assert release_free_memory() == (platform.libc_ver()[0] == "glibc")


class FakeAdapter:
    """--adapt-draft's adapter as the scheduler sees it: ``units`` units of idle work; each unit
    records whether a job was waiting or a decode running when it started (it never may)."""

    def __init__(self, units: int):
        self.left, self.done, self.violations = units, 0, []
        self.scheduler: ModelScheduler | None = None

    def pending(self):
        return self.left > 0

    def work(self):
        with self.scheduler._cond:
            waiting = sum(len(q) for q in self.scheduler._waiting.values())
        if waiting:
            self.violations.append(waiting)
        self.left -= 1
        self.done += 1
        threading.Event().wait(0.002)  # a short unit


def test_adaptation_runs_only_when_no_job_waits():
    engine = FakeEngine()
    engine.adapter = FakeAdapter(units=400)

    async def main():
        scheduler = ModelScheduler(engine)
        engine.adapter.scheduler = scheduler
        for round in range(20):  # jobs arrive while the adapter has work
            await asyncio.gather(*(scheduler.run(s, job(f"{s}{round}", steps=2)) for s in "abc"))
            await asyncio.sleep(0.003)
        await scheduler.close()
        return scheduler

    scheduler = run(main())
    assert scheduler.jobs_done == 60
    assert engine.adapter.done > 0  # it did run, in the gaps
    assert engine.adapter.violations == []


def test_a_failing_adapter_is_turned_off_and_serving_goes_on():
    engine = FakeEngine()

    class Broken(FakeAdapter):
        def work(self):
            self.done += 1
            raise RuntimeError("boom")

    engine.adapter = Broken(units=5)

    async def main():
        scheduler = ModelScheduler(engine)
        await asyncio.sleep(0.05)  # idle: the adapter fails once
        first = await scheduler.run("a", job("a", steps=1))
        await asyncio.sleep(0.05)
        second = await scheduler.run("a", job("a2", steps=1))
        await scheduler.close()
        return first, second

    assert run(main()) == ("decoded a", "decoded a2")
    assert engine.adapter.done == 1


def test_a_job_whose_program_fails_to_close_is_still_withdrawn_and_the_others_go_on():
    """Recalling a running job closes its program; a program whose cleanup raised took the model thread down
    (the job's awaiter hung, every other session's jobs failed, the scheduler closed)."""
    engine = FakeEngine()

    def messy(engine):
        encoded = engine.encode("a")
        try:
            yield DecodeCall(encoded, DecodeRequest(max_new_tokens=10**6))
        except GeneratorExit:
            raise ValueError("cleanup failed") from None

    async def main():
        scheduler = ModelScheduler(engine)
        recalled = asyncio.ensure_future(scheduler.run("a", messy))
        other = asyncio.ensure_future(scheduler.run("b", job("b", 50)))
        await asyncio.sleep(0.1)
        scheduler.withdraw("a", Priority.UPDATE, running=True)
        assert await recalled is WITHDRAWN
        assert await other == "decoded b"
        assert await scheduler.run("c", job("c", 1)) == "decoded c"  # still serving
        await scheduler.close()

    run(main())


def test_a_job_that_raised_still_counts_its_model_time():
    engine = FakeEngine()

    def failing(engine):
        encoded = engine.encode("x")
        time.sleep(0.05)  # model work done before the fault
        yield DecodeCall(encoded, DecodeRequest(max_new_tokens=1))
        raise ValueError("boom")

    async def main():
        scheduler = ModelScheduler(engine)
        with pytest.raises(ValueError, match="boom"):
            await scheduler.run("a", failing)
        assert scheduler.model_seconds("a") >= 0.05
        await scheduler.close()

    run(main())


def test_background_work_alone_shows_no_load():
    """The lag is the caption jobs' turnaround: while only a translation or a REST upload (BACKGROUND) runs, the
    lag the last caption jobs left must not keep the level up (new sessions refused as busy, for nothing)."""
    engine = FakeEngine()

    def slow_update(engine):
        engine.encode("u")
        time.sleep(0.3)
        return "ok"

    def long_background(engine):
        encoded = engine.encode("bg")
        for _ in range(40):
            time.sleep(0.05)
            yield DecodeCall(encoded, DecodeRequest(max_new_tokens=1))
        return "bg done"

    async def main():
        scheduler = ModelScheduler(engine, SchedulerOptions(load=LoadPolicy(smoothing=1.0)))
        background = asyncio.ensure_future(scheduler.run("rest", long_background, Priority.BACKGROUND))
        await asyncio.sleep(0.01)
        await asyncio.gather(*(scheduler.run(name, slow_update) for name in "abc"))
        assert not background.done()
        assert scheduler.load.level == 0 and scheduler.load.lag_s == 0.0
        await background
        await scheduler.close()

    run(main())
