"""What a benchmark records of its machine, read from a /proc/cpuinfo: the first processor's model name,
family/model/stepping and flags; nothing made up where the file says nothing."""

from pathlib import Path

from specscribe.machine import cpu_flags, cpu_model, cpu_signature, flags_say_fast_bf16

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse2 avx2 fma

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: Other
stepping\t: 0
flags\t\t: avx512_bf16
"""


def test_the_first_processors_fields_are_read(tmp_path: Path):
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO)
    assert cpu_model(info) == "AMD EPYC"
    assert cpu_signature(info) == "25/1/1"
    assert cpu_flags(info) == {"fpu", "sse2", "avx2", "fma"} and not flags_say_fast_bf16(cpu_flags(info))


def test_an_unreadable_or_bare_cpuinfo_gives_no_signature_and_no_flags(tmp_path: Path):
    missing = tmp_path / "none"
    assert cpu_signature(missing) is None and cpu_flags(missing) == set() and cpu_model(missing)
    bare = tmp_path / "bare"
    bare.write_text("processor\t: 0\nmodel name\t: ARM thing\n")
    assert cpu_signature(bare) is None and cpu_model(bare) == "ARM thing"


def test_usable_cores_follow_the_affinity_mask_and_batch_workers_share_them(monkeypatch):
    import os

    from specscribe import machine
    from specscribe.models.engines import EngineOptions
    from specscribe.pipeline.batch import BatchOptions, threads_per_worker

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 5, 7, 9}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert machine.usable_cores() == 4  # a cpuset of 4 on a 64-CPU host
    options = BatchOptions(engine=EngineOptions())
    assert threads_per_worker(options, 2) == 2 and threads_per_worker(options, 8) == 1
    assert threads_per_worker(BatchOptions(engine=EngineOptions(threads=3)), 2) == 3  # --threads wins

    def no_affinity(pid):
        raise AttributeError

    monkeypatch.setattr(os, "sched_getaffinity", no_affinity)
    assert machine.usable_cores() == 64  # not Linux: every CPU
