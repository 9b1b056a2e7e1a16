"""Start-up: a 5 s clip transcribed from process start to exit, `specscribe transcribe` against faster-whisper.

Sides, interleaved in every repeat (warm, faster-whisper, then cold while --cold runs are left):
- warm: ``specscribe transcribe CLIP -f txt -o TMP`` with default options, the weight cache built;
- cold: the same with the weight cache folder emptied first (model.bin itself stays in the OS
  page cache: this is the first run after install, not a cold disk);
- faster-whisper: a script that imports faster_whisper, loads WhisperModel(base folder,
  device="cpu", compute_type="int8") and transcribes the clip (beam_size=1, vad_filter=True).
The spec runs use a temporary SPECSCRIBE_HOME whose models/ links to the installed models, so the
user's own weight cache is never touched. specscribe's own modules are byte-compiled first
(``project_bytecode_compiled``), as an installed package's are. Each repeat also runs one in-process
breakdown of the warm side (import torch, engine load and its weight part, VAD, first encode, decode). Besides
wall times, each run records its own CPU seconds and those the rest of the machine used meanwhile
(others_cpu), to tell a slow run from a busy machine.

    python scripts/bench_startup.py [--repeat 5] [--cold 1] [--clip FILE] [--wait-idle 0] [--out startup.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import dataclass
from pathlib import Path

FW_SCRIPT = """
import sys
from faster_whisper import WhisperModel
model = WhisperModel(sys.argv[1], device="cpu", compute_type="int8")
segments, _ = model.transcribe(sys.argv[2], beam_size=1, vad_filter=True)
open(sys.argv[3], "w").write("".join(s.text for s in segments).strip() + "\\n")
"""

BREAKDOWN_SCRIPT = """
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
try:
    from specscribe.models import weight_cache
except ImportError:  # a tree from before the weight cache: no weights_load figure
    weight_cache = None
from specscribe.models.engines import EngineOptions, load_transcriber
from specscribe.pipeline.audio import load_audio
from specscribe.pipeline.longform import transcribe_audio
t2 = time.perf_counter()
weights = [None]
if weight_cache is not None:
    original = weight_cache.load_whisper_model
    def timed(*args, **kwargs):
        started = time.perf_counter()
        out = original(*args, **kwargs)
        weights.append(time.perf_counter() - started)
        return out
    weight_cache.load_whisper_model = timed
engine = load_transcriber(EngineOptions())
t3 = time.perf_counter()
audio = load_audio(sys.argv[1])
transcript = transcribe_audio(engine, audio)
t4 = time.perf_counter()
timing = transcript.timing
print(json.dumps({
    "compute_type": engine.compute_type, "import_torch": t1 - t0, "import_specscribe": t2 - t1,
    "engine_load": t3 - t2, "weights_load": weights[-1], "vad": timing.vad, "first_encode": timing.encode,
    "decode": timing.decode, "transcribe_total": t4 - t3, "script_total": t4 - t0,
}))
"""


def make_clip(seconds: float, dest: Path) -> Path:
    """The first `seconds` of jfk.flac as a 16 kHz mono wav."""
    import numpy as np

    from specscribe.clips import clips_dir
    from specscribe.pipeline.audio import SAMPLE_RATE, load_audio

    audio = load_audio(clips_dir() / "jfk.flac")[: int(seconds * SAMPLE_RATE)]
    with wave.open(str(dest), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
        out.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return dest


@dataclass(frozen=True)
class Run:
    """One timed process. Attributes: wall, cpu (its user + system seconds), others_cpu (CPU
    seconds the rest of the machine used meanwhile: a shared machine's noise)."""

    wall: float
    cpu: float
    others_cpu: float


def busy_cpu_seconds() -> float:
    """CPU seconds all processes of the machine have used since boot (/proc/stat; 0 elsewhere)."""
    try:
        ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def wait_idle(limit: float) -> None:
    """Wait (at most limit seconds) until the machine has been idle for a second: on a shared
    machine, torch's threads slow down many times over while another process holds the cores."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = busy_cpu_seconds()
        time.sleep(1.0)
        if busy_cpu_seconds() - before < 0.1:
            return


def timed_run(cmd: list[str], env: dict, cwd: Path) -> Run:
    """Wall seconds of one process, its CPU seconds, and the CPU seconds others used meanwhile.
    cwd: a neutral folder (with `python -c`, the current folder comes first on sys.path)."""
    children, busy = resource.getrusage(resource.RUSAGE_CHILDREN), busy_cpu_seconds()
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} ... failed ({done.returncode}):\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    return Run(wall, cpu, max(0.0, busy_cpu_seconds() - busy - cpu))


def summary(runs: list[Run]) -> dict:
    walls = [r.wall for r in runs]
    return {
        "runs": [round(t, 3) for t in walls], "min": round(min(walls), 3), "median": round(statistics.median(walls), 3),
        "cpu_median": round(statistics.median(r.cpu for r in runs), 3),
        "others_cpu": [round(r.others_cpu, 2) for r in runs],
    }


def compile_project() -> bool:
    """Byte-compile specscribe's own packages, as pip does for an installed package (faster-whisper's
    and torch's .pyc come with their install). An editable install writes them on first import, unless
    PYTHONDONTWRITEBYTECODE is set: then every run would compile ~30 modules again (about 0.05 s)."""
    import compileall

    import specscribe
    import specscribe.models
    import specscribe.pipeline
    import specscribe.web

    folders = {Path(m.__file__).parent for m in (specscribe, specscribe.models, specscribe.pipeline, specscribe.web)}
    return all(compileall.compile_dir(str(f), quiet=1) for f in sorted(folders))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5, help="interleaved rounds (default: %(default)s)")
    p.add_argument("--cold", type=int, default=1, help="cold-cache runs, in the first rounds (default: %(default)s)")
    p.add_argument("--clip", default=None, help="audio file (default: the first 5 s of jfk.flac)")
    p.add_argument("--model", default="base")
    p.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                   help="before each run, wait up to this long for an idle machine (default: no wait)")
    p.add_argument("--out", default=None, help="write the JSON here too")
    args = p.parse_args()
    if args.repeat < 1 or args.cold < 0:
        p.error("--repeat must be >= 1 and --cold >= 0")

    from specscribe.machine import cpu_times, machine_info
    from specscribe.models.compute import resolve_compute_type
    from specscribe.models.registry import models_dir, resolve_model

    started = cpu_times()
    compiled = compile_project()

    folder = resolve_model(args.model)
    specscribe = Path(sys.executable).parent / "specscribe"
    spec_cmd = [str(specscribe)] if specscribe.exists() else [sys.executable, "-m", "specscribe"]
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp_name:
        tmp = Path(tmp_name)
        clip = Path(args.clip) if args.clip else make_clip(5.0, tmp / "clip5.wav")
        home = tmp / "home"
        home.mkdir()
        (home / "models").symlink_to(models_dir(), target_is_directory=True)
        env = {**os.environ, "SPECSCRIBE_HOME": str(home)}
        outs = {side: tmp / side for side in ("warm", "cold", "fw")}
        transcribe = spec_cmd + ["transcribe", str(clip), "--model", args.model, "-f", "txt"]
        commands = {
            "warm": transcribe + ["-o", str(outs["warm"])],
            "cold": transcribe + ["-o", str(outs["cold"])],
            "fw": [sys.executable, "-c", FW_SCRIPT, str(folder), str(clip), str(tmp / "fw.txt")],
        }
        timed_run(commands["warm"], env, tmp)  # builds the weight cache; warms the OS page cache
        timed_run(commands["fw"], env, tmp)
        times: dict[str, list[Run]] = {"warm": [], "cold": [], "fw": []}
        breakdowns = []
        load_before = os.getloadavg()
        for i in range(args.repeat):
            for side in ("warm", "fw", "cold") if i < args.cold else ("warm", "fw"):
                if side == "cold":
                    shutil.rmtree(home / "cache", ignore_errors=True)
                wait_idle(args.wait_idle)
                times[side].append(timed_run(commands[side], env, tmp))
            cmd = [sys.executable, "-c", BREAKDOWN_SCRIPT, str(clip)]
            wait_idle(args.wait_idle)
            out = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"breakdown failed:\n{out.stderr[-2000:]}")
            breakdowns.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {i + 1}: warm {times['warm'][-1].wall:.2f} s, faster-whisper {times['fw'][-1].wall:.2f} s"
                  + (f", cold {times['cold'][-1].wall:.2f} s" if i < args.cold else ""), file=sys.stderr)
        texts = {side: (outs[side] / f"{clip.stem}.txt").read_text().strip() for side in ("warm", "cold") if times[side]}
        texts["fw"] = (tmp / "fw.txt").read_text().strip()
        cache_files = {f.name: f.stat().st_size for f in sorted((home / "cache").glob("*.safetensors"))}

    compute_type = breakdowns[0]["compute_type"] if breakdowns else resolve_compute_type("auto", "cpu")
    names = {"warm": "spec_warm", "cold": "spec_cold", "fw": "faster_whisper"}
    sides = {names[side]: summary(t) for side, t in times.items() if t}
    warm, fw = sides["spec_warm"], sides["faster_whisper"]
    report = {
        "what": "process start to exit, 5 s clip, spec engine (default options) vs faster-whisper int8",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "clip": str(clip) if args.clip else "first 5 s of jfk.flac",
        "machine": machine_info(compute_type, since=started),
        "wait_idle_seconds": args.wait_idle,
        "load_average_before_after": [round(x, 2) for x in load_before] + [round(x, 2) for x in os.getloadavg()],
        "seconds": sides,
        "ratio_warm_to_faster_whisper": {
            "min": round(warm["min"] / fw["min"], 3), "median": round(warm["median"] / fw["median"], 3),
        },
        "breakdown_warm_seconds": {  # medians over the rounds
            k: round(statistics.median(b[k] for b in breakdowns), 3) if breakdowns[0][k] is not None else None
            for k in breakdowns[0] if k != "compute_type"
        },
        "weight_cache_files": cache_files,
        "project_bytecode_compiled": compiled,
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE"),
        "texts": texts,
    }
    if "spec_cold" in sides:
        report["ratio_cold_to_faster_whisper"] = {"min": round(sides["spec_cold"]["min"] / fw["min"], 3)}
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
