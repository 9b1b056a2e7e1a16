"""What machine a benchmark ran on: CPU model, the flags that decide the compute type, threads.

Every ``scripts/bench_*.py`` JSON carries ``machine_info()`` so that a figure always names its
machine kind (a 2-core Xeon with AMX, an EPYC with AVX512-BF16, or an AVX2-only EPYC differ by
several times on the same pass).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

FLAGS_OF_INTEREST = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "amx_int8")


def _cpuinfo(cpuinfo: Path) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where it is unreadable)."""
    fields: dict[str, str] = {}
    try:
        for line in cpuinfo.read_text().splitlines():
            if not line.strip():
                break
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name ("unknown" where /proc/cpuinfo is unreadable)."""
    return _cpuinfo(cpuinfo).get("model name") or platform.processor() or "unknown"


def cpu_signature(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """Family, model and stepping, e.g. "25/1/1" (a Zen 3 EPYC): a hypervisor may call every EPYC "AMD EPYC",
    and two of them can differ by 1.5x on the same pass. None where /proc/cpuinfo says nothing."""
    info = _cpuinfo(cpuinfo)
    parts = [info.get(k) for k in ("cpu family", "model", "stepping")]
    return "/".join(parts) if all(parts) else None


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is unreadable). No torch needed."""
    return set(_cpuinfo(cpuinfo).get("flags", "").split())


def flags_say_fast_bf16(flags: set[str]) -> bool:
    """Whether these CPU flags give native bf16 matmuls: AMX (amx_bf16) or AVX512-BF16. No torch needed."""
    return "amx_bf16" in flags or "avx512_bf16" in flags


def usable_cores() -> int:
    """The CPUs this process may run on: its affinity mask (a container's cpuset, `taskset`, a pinned test
    worker), not every CPU of the host as os.cpu_count() says."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def cpu_times(stat: Path = Path("/proc/stat")) -> tuple[int, int] | None:
    """(stolen, total) CPU ticks of all cores since boot; None where /proc/stat is unreadable."""
    try:
        fields = stat.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return (ticks[7], sum(ticks)) if fields[0] == "cpu" and len(ticks) == 8 else None


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of CPU time the hypervisor took from this VM between two cpu_times() readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round((after[0] - before[0]) / (after[1] - before[1]), 3)


def machine_info(compute_type: str | None = None, since: tuple[int, int] | None = None) -> dict:
    """CPU model, vendor-neutral flags (avx512_bf16, amx ...), cores, torch threads and version,
    and the compute type the benchmark ran at (as resolved, not "auto"). since: a cpu_times()
    reading from the run's start, for ``cpu_steal_share`` (time the hypervisor gave to other
    guests: on a shared host it slows every figure, and interleaving spreads it evenly)."""
    from specscribe.models.compute import cpu_has_fast_bf16

    flags = cpu_flags()
    info = {
        "cpu_model": cpu_model(),
        "cpu_signature": cpu_signature(),  # cpu family/model/stepping
        "cpu_flags": {f: f in flags for f in FLAGS_OF_INTEREST},
        "fast_bf16": cpu_has_fast_bf16(flags),
        "cores": usable_cores(),
        "host_cores": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        info["torch"] = None
    if compute_type is not None:
        info["compute_type"] = compute_type
    if since is not None:
        info["cpu_steal_share"] = steal_share(since, cpu_times())
    return info


def write_report(report: dict, out: str) -> None:
    """A benchmark's JSON to the path `out` (folders made), or to stdout for "-"; "wrote PATH" on stderr."""
    import json
    import sys

    text = json.dumps(report, indent=2)
    if out == "-":
        print(text)
        return
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text + "\n")
    print(f"wrote {out}", file=sys.stderr)
