"""LaneRunner's idle hook (--adapt-draft between windows in batch): it runs after a step that finished
a window, never inside a step, and a failing one is turned off while the lanes finish."""

from __future__ import annotations

from specscribe.models.types import DecodeRequest, EncodedAudio
from specscribe.pipeline.lanes import DecodeCall, LaneRunner


class StepLoop:
    """A DecodeLoop whose decodes each take `max_new_tokens` steps; logs "step" per step."""

    def __init__(self, log: list):
        self.log, self.left = log, {}

    def submit(self, tag, encoded, request):
        self.left[tag] = request.max_new_tokens

    def step(self):
        self.log.append("step")
        done = []
        for tag in list(self.left):
            self.left[tag] -= 1
            if self.left[tag] == 0:
                del self.left[tag]
                done.append((tag, f"result {tag}"))
        return done

    def cancel(self, tag):
        self.left.pop(tag, None)

    def __len__(self):
        return len(self.left)


def lane(windows: int, steps: int):
    results = []
    for _ in range(windows):
        results.append((yield DecodeCall(EncodedAudio(1.0, None), DecodeRequest(max_new_tokens=steps))))
    return results


def test_idle_work_runs_between_windows_only():
    log: list = []
    runner = LaneRunner(StepLoop(log), width=2, idle=lambda: log.append("idle"))
    done = {}
    runner.run(iter([("a", lane(2, 3)), ("b", lane(1, 2))]), done.__setitem__, lambda k, e: None)
    assert done == {"a": ["result a", "result a"], "b": ["result b"]}
    # steps 1-2: b finishes at 2, a at 3, a's second window at 6
    assert log == ["step", "step", "idle", "step", "idle", "step", "step", "step", "idle"]


def test_failing_idle_work_is_turned_off_and_the_lanes_finish():
    log: list = []

    def broken():
        log.append("idle")
        raise RuntimeError("boom")

    runner = LaneRunner(StepLoop(log), width=1, idle=broken)
    done = {}
    runner.run(iter([("a", lane(3, 1))]), done.__setitem__, lambda k, e: None)
    assert done == {"a": ["result a"] * 3}
    assert log.count("idle") == 1 and runner.idle is None


def test_a_decode_that_fails_fails_its_own_lane_and_the_others_finish():
    """The ct2 engine decodes one window at a time (SequentialDecodeLoop): a window whose decode raises fails its
    lane (its file), and the other lanes finish; before, the exception ended the whole batch."""
    from specscribe.models.engines import SequentialDecodeLoop

    class Fake:
        def decode(self, encoded, request):
            if encoded.handle == "bad":
                raise RuntimeError("decoder fault")
            return f"result {encoded.handle}"

    def one(handle):
        return (yield DecodeCall(EncodedAudio(1.0, handle), DecodeRequest()))

    done, failed = {}, {}
    runner = LaneRunner(SequentialDecodeLoop(Fake()), width=2)
    runner.run(iter([("a", one("a")), ("b", one("bad")), ("c", one("c"))]), done.__setitem__, failed.__setitem__)
    assert done == {"a": "result a", "c": "result c"}
    assert list(failed) == ["b"] and str(failed["b"]) == "decoder fault"
