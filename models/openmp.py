"""One OpenMP thread pool at a time: the model thread's.

torch's CPU kernels run on OpenMP (the libgomp that torch ships). libgomp keeps a pool of worker
threads for every thread that has started a parallel region, and the pool lives as long as that
thread. When it manages more threads than the machine has CPUs, libgomp cuts its workers' spin-wait
to almost nothing, so the workers sleep between kernels and every kernel pays a futex wake-up and
two context switches.

On a 2-core machine that is what happens as soon as two threads have run torch: the thread that
loaded the model (or decoded something before a scheduler started) keeps its pool, and the model
thread (pipeline/scheduler.py) gets a second one. Measured on a 2-core Xeon with AMX (bf16):
a decoder pass of a 60-token prompt plus 32 drafted tokens took 41.8 ms on the model thread against
19.3 ms on the loading thread, a one-token step 16.9 against 8.8 ms, a 14 s encode 63 against 55 ms;
with the loading thread's pool released first, the model thread ran them in 18.5, 8.2 and 54 ms
(docs/benchmarks.md, "A stale OpenMP pool").

``release_openmp_pool()`` frees the calling thread's pool (OpenMP 5.0 ``omp_pause_resource_all``):
the scheduler calls it on the thread that starts the model thread, which from then on leaves torch
to the model thread. A thread that runs torch later gets a new pool (and the slowdown) back.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

OMP_PAUSE_SOFT = 1  # omp_pause_resource_t: free the threads, keep what can be kept


def _runtimes() -> tuple[ctypes.CDLL, ...]:
    """The OpenMP runtimes loaded in this process now that can release a pool (Linux: from /proc/self/maps;
    read at each call: a runtime loaded later, with the engine, counts too)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux: nothing to do here
        return ()
    paths = sorted({line.split()[-1] for line in maps.splitlines() if "libgomp" in line.rsplit("/", 1)[-1]})
    found = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            release = lib.omp_pause_resource_all
        except (OSError, AttributeError):  # an older runtime without OpenMP 5.0's pause
            continue
        release.argtypes, release.restype = [ctypes.c_int], ctypes.c_int
        found.append(lib)
    return tuple(found)


def release_openmp_pool() -> bool:
    """Free the calling thread's OpenMP worker threads (if it has any). True if a runtime took the call.
    Call it outside torch work only: between kernels, never from inside one. A runtime not loaded yet holds
    no pool, so none is loaded here."""
    released = [lib.omp_pause_resource_all(OMP_PAUSE_SOFT) == 0 for lib in _runtimes()]  # every runtime: no short cut
    return any(released)
