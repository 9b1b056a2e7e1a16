"""The one-line errors of `live`, `serve`, `stream` and `transcribe` for bad options and outputs, before any model loads or any
server starts (nothing here loads weights or binds a port)."""

from __future__ import annotations


import numpy as np
import pytest
from wavs import write_wav

from specscribe.cli import main


class GotPastTheChecks(Exception):
    pass


@pytest.fixture
def no_model(monkeypatch):
    """load_transcriber and the server's socket fail the test: the command should have stopped before them."""
    import specscribe.models.engines as engines
    import specscribe.web.server as server

    def refuse(*args, **kwargs):
        raise GotPastTheChecks()

    monkeypatch.setattr(engines, "load_transcriber", refuse)
    monkeypatch.setattr(server, "bind_socket", refuse)


@pytest.fixture
def wav(tmp_path):
    return write_wav(tmp_path / "one.wav", np.zeros(16000, np.int16))


def one_error_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "error" in err and all(w in err for w in words), err
    return err


@pytest.mark.parametrize("flag, value", [
    ("--encoder-pad", "nan"), ("--settle-after", "inf"), ("--pause-commit", "nan"), ("--agree-gap", "nan"),
    ("--update-interval", "nan"), ("--loaded-encoder-pad", "nan"), ("--loaded-encoder-pad", "-1"),
])
def test_live_and_serve_reject_non_finite_streaming_options(no_model, wav, capsys, flag, value):
    assert main(["live", "--input", str(wav), flag, value]) == 2
    one_error_line(capsys, flag)
    assert main(["serve", "--port", "0", flag, value]) == 2
    one_error_line(capsys, flag)


@pytest.mark.parametrize("flag", ["--max-upload-mb", "--max-upload-hours", "--max-session-seconds", "--idle-timeout",
                                  "--max-backlog-seconds", "--drain-timeout"])
def test_serve_rejects_non_finite_limits(no_model, capsys, flag):
    assert main(["serve", "--port", "0", flag, "nan"]) == 2
    one_error_line(capsys, flag)


def test_live_and_serve_reject_negative_threads(no_model, wav, capsys):
    assert main(["live", "--input", str(wav), "--threads", "-1"]) == 2
    one_error_line(capsys, "--threads")
    assert main(["serve", "--port", "0", "--threads", "-2"]) == 2
    one_error_line(capsys, "--threads")
    with pytest.raises(GotPastTheChecks):  # 0 is the library default: accepted
        main(["live", "--input", str(wav), "--threads", "0"])


@pytest.mark.parametrize("flag, value", [("--patience", "nan"), ("--patience", "inf"), ("--length-penalty", "nan"),
                                         ("--patience", "0")])
def test_transcribe_rejects_a_non_finite_patience_or_length_penalty(no_model, wav, capsys, flag, value):
    assert main(["transcribe", str(wav), "--beam-size", "2", flag, value]) == 2
    one_error_line(capsys, "--patience" if value == "0" else flag)


@pytest.mark.parametrize("speed", ["nan", "inf", "-1"])
def test_stream_rejects_a_non_finite_or_negative_speed(wav, capsys, speed):
    assert main(["stream", str(wav), "--speed", speed, "--url", "ws://127.0.0.1:9/v1/listen"]) == 2
    one_error_line(capsys, "--speed")


def test_stream_names_the_file_it_cannot_read(tmp_path, capsys):
    missing = tmp_path / "missing.wav"
    assert main(["stream", str(missing), "--url", "ws://127.0.0.1:9/v1/listen"]) == 1
    one_error_line(capsys, str(missing), "no such file")


@pytest.mark.parametrize("make", [lambda p: p.mkdir(), lambda p: p.touch(mode=0o444)], ids=["folder", "read-only"])
def test_live_output_that_cannot_be_written_fails_before_the_model_loads(no_model, wav, tmp_path, capsys, make):
    import os

    out = tmp_path / "captions.srt"
    make(out)
    if out.is_file() and os.access(out, os.W_OK):
        pytest.skip("running as root: a read-only file is writable")
    assert main(["live", "--input", str(wav), "--output", str(out)]) == 2
    one_error_line(capsys, "--output", str(out))


@pytest.mark.parametrize("host, warned", [("0.0.0.0", True), ("192.0.2.7", True), ("127.0.0.1", False),
                                          ("localhost", False), ("::1", False)])
def test_serve_warns_of_a_non_loopback_address_without_an_api_key(no_model, capsys, monkeypatch, host, warned):
    monkeypatch.delenv("SPECSCRIBE_API_KEY", raising=False)
    with pytest.raises(GotPastTheChecks):
        main(["serve", "--port", "0", "--host", host])
    assert ("without an API key" in capsys.readouterr().err) == warned
