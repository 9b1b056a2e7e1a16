"""scripts/system_deps.sh and the Makefile's use of it, run against a fake PATH: fake tools present or
absent, a fake `id` (root or not), a fake `sudo` and a fake `apt-get` that record how they were called."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "system_deps.sh"
SH = shutil.which("sh") or "/bin/sh"
TEST_PACKAGES = "libportaudio2 chromium chromium-driver ffmpeg espeak-ng"


def _tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!{SH}\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _fake_path(tmp_path: Path, *, uid: int = 0, portaudio: bool = True, tools=(), sudo: str | None = None,
               apt: bool = True, venv: bool = True) -> tuple[dict[str, str], Path]:
    """A bin folder with only what the case needs; returns (env, log file of sudo/apt-get calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for real in ("grep", "env", "sh", "make", "cat"):
        found = shutil.which(real)
        if found:
            (bin_dir / real).symlink_to(found)
    _tool(bin_dir, "id", f'[ "$1" = -u ] && echo {uid}')
    _tool(bin_dir, "ldconfig", "echo '\tlibportaudio.so.2 (libc6,x86-64) => /usr/lib/libportaudio.so.2'" if portaudio else "true")
    _tool(bin_dir, "python3", "exit 0" if venv else "exit 1")
    for name in tools:
        _tool(bin_dir, name, "exit 0")
    if apt:
        _tool(bin_dir, "apt-get", f'echo "apt-get $*" >> {log}')
    if sudo == "passwordless":
        _tool(bin_dir, "sudo", f'echo "sudo $*" >> {log}; [ "$1" = -n ] && shift; [ "$1" = true ] && exit 0; exec "$@"')
    elif sudo == "password":
        _tool(bin_dir, "sudo", f'echo "sudo $*" >> {log}; exit 1')
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    return env, log


def _run(mode: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([SH, str(SCRIPT), mode], env=env, capture_output=True, text=True, timeout=30)


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


ALL_TEST_TOOLS = ("chromium", "chromedriver", "ffmpeg", "espeak-ng")


def test_nothing_missing_is_silent_and_calls_nothing(tmp_path):
    env, log = _fake_path(tmp_path, uid=1000, tools=ALL_TEST_TOOLS)
    out = _run("test", env)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
    assert _calls(log) == []


def test_root_installs_exactly_the_missing_packages_with_apt_get(tmp_path):
    env, log = _fake_path(tmp_path, uid=0, portaudio=False, tools=("ffmpeg",))
    out = _run("test", env)
    assert out.returncode == 0, out.stderr
    assert _calls(log) == [
        "apt-get update -qq",
        "apt-get install -y -qq --no-install-recommends libportaudio2 chromium chromium-driver espeak-ng",
    ]


def test_run_needs_only_portaudio_not_the_browser(tmp_path):
    env, log = _fake_path(tmp_path, uid=0, portaudio=False)  # no chromium, ffmpeg, espeak-ng either
    assert _run("run", env).returncode == 0
    assert _calls(log) == ["apt-get update -qq", "apt-get install -y -qq --no-install-recommends libportaudio2"]
    (tmp_path / "present").mkdir()
    env, log = _fake_path(tmp_path / "present", uid=0, portaudio=True)
    assert _run("run", env).returncode == 0
    assert _calls(log) == []


def test_passwordless_sudo_installs_through_sudo(tmp_path):
    env, log = _fake_path(tmp_path, uid=1000, sudo="passwordless", tools=ALL_TEST_TOOLS, venv=False)
    out = _run("test", env)
    assert out.returncode == 0, out.stderr
    calls = _calls(log)
    assert calls[0] == "sudo -n true"
    assert "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv" in calls
    assert calls[-1] == "apt-get install -y -qq --no-install-recommends python3-venv"


@pytest.mark.parametrize("sudo", [None, "password"])
def test_without_root_or_passwordless_sudo_one_line_names_the_command(tmp_path, sudo):
    env, log = _fake_path(tmp_path, uid=1000, sudo=sudo, portaudio=False)
    out = _run("test", env)
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].endswith(f"sudo apt-get update && sudo apt-get install -y --no-install-recommends {TEST_PACKAGES}")
    assert not any(c.startswith("apt-get") for c in _calls(log))


def test_without_apt_get_one_line_lists_the_packages(tmp_path):
    env, log = _fake_path(tmp_path, uid=0, apt=False, tools=("chromium", "chromedriver", "ffmpeg"))
    out = _run("test", env)
    assert out.returncode == 1
    assert len(out.stderr.splitlines()) == 1
    assert "espeak-ng" in out.stderr and "chromium" not in out.stderr


def test_skip_variable_skips(tmp_path):
    env, log = _fake_path(tmp_path, uid=1000, portaudio=False)
    out = _run("run", {**env, "SPECSCRIBE_SKIP_SYSTEM_DEPS": "1"})
    assert (out.returncode, out.stderr) == (0, "")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("target", ["run", "test"])
def test_make_stops_before_anything_else_when_packages_are_missing(tmp_path, target):
    """The line comes first and alone: no venv is created, no pip runs."""
    work = tmp_path / "clone"
    (work / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", work / "Makefile")
    shutil.copy(SCRIPT, work / "scripts" / "system_deps.sh")
    (work / "pyproject.toml").write_text("")
    env, log = _fake_path(tmp_path, uid=1000, portaudio=False)
    out = subprocess.run(["make", target], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert out.stdout.strip() == ""
    assert out.stderr.splitlines()[0].startswith("specscribe: missing system packages; run this")
    assert "libportaudio2" in out.stderr.splitlines()[0]
    assert not (work / ".venv").exists()
