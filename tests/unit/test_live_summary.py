"""The lines `specscribe live` ends with (specscribe/commands/live.py summary)."""

from specscribe.commands.live import summary


def test_the_summary_says_when_the_streams_decodes_fell_behind():
    stats = {"audio_s": 11.0, "rtf": 0.15, "tokens_per_target_pass": 2.5, "finals": 3,
             "stream_load": {"level": 0, "lag_s": 0.1, "update_factor": 1, "level_max": 0}}
    assert summary(stats) == ["[11.0 s audio, real-time factor 0.15, 2.50 tokens per target pass, 3 finals]"]
    slow = summary({**stats, "stream_load": {**stats["stream_load"], "level_max": 2}})
    assert len(slow) == 2 and "own load level 2 of 3" in slow[1] and "--model tiny.en" in slow[1]
    # a file read as fast as possible always outruns the decodes: no word about the CPU then
    assert summary({**stats, "stream_load": {**stats["stream_load"], "level_max": 3}}, realtime=False) == summary(stats)
    assert summary({}) == ["[0.0 s audio, real-time factor 0.00, 0 finals]"]  # a stream that ended before any stats
