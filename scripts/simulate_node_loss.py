"""A simulated cluster run with a node lost mid-run: does `--ray` still finish every file, once, with
the local run's text?

Ray's ``cluster_utils.Cluster`` starts, on this one machine, a head node without CPUs (the driver's)
and ``--nodes`` worker nodes of two logical CPUs each (a one-thread actor and decode tasks), every
node with its own raylet and object store. The batch (pipeline/ray_batch.py, one transcriber actor per
worker node) runs against that cluster. As soon as an actor is inside a call, its whole node is
removed (raylet, object store and every worker process on it go): the blocks it held are lost, and
Ray has to restart the actor elsewhere and run its block again. The outputs are then compared with a
plain local run of the same folder, byte for byte.

    python scripts/simulate_node_loss.py --out benchmarks/<machine>/simulate_node_loss.json
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path


def folder(work: Path) -> Path:
    from specscribe.clips import batch_set

    root = work / "in"
    root.mkdir()
    for f, _ in batch_set(lecture=False):
        shutil.copy(f, root)
    return root


def texts(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.txt"))}


def busy_actor_node(cluster, workers):
    """The worker node whose raylet is the parent of a FileTranscriber process inside a call."""
    import psutil

    raylets = {node.all_processes["raylet"][0].process.pid: node for node in workers}
    for proc in psutil.process_iter(["cmdline", "ppid"]):
        cmdline = " ".join(proc.info["cmdline"] or ()).strip()
        if "FileTranscriber" in cmdline and cmdline.endswith(".submit") and proc.info["ppid"] in raylets:
            return raylets[proc.info["ppid"]], proc.pid
    return None, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="-", help="JSON output path (default: stdout)")
    parser.add_argument("--nodes", type=int, default=2, help="worker nodes (one transcriber actor each)")
    args = parser.parse_args(argv)

    from ray.cluster_utils import Cluster

    from specscribe.machine import machine_info, write_report
    from specscribe.models.compute import resolve_compute_type
    from specscribe.models.engines import EngineOptions
    from specscribe.pipeline.batch import BatchOptions, run_batch
    from specscribe.pipeline.inputs import collect_inputs
    from specscribe.pipeline.ray_batch import RayOptions, run_ray_batch

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        items, _ = collect_inputs([str(folder(work))])
        base = BatchOptions(engine=EngineOptions(threads=1), formats=("txt",), quiet=True)
        local = run_batch(items, replace(base, output_dir=work / "local"), err=io.StringIO())

        store = 200 * 1024 * 1024
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                                 "object_store_memory": store})
        workers = [cluster.add_node(num_cpus=2, object_store_memory=store) for _ in range(args.nodes)]
        err = io.StringIO()
        result: dict = {}

        def batch() -> None:
            try:
                result["report"] = run_ray_batch(items, replace(base, output_dir=work / "ray"),
                                                 RayOptions(address=cluster.address, workers=args.nodes), err)
            except BaseException as exc:  # reported in the JSON
                result["error"] = f"{type(exc).__name__}: {exc}"

        started = time.perf_counter()
        thread = threading.Thread(target=batch)
        thread.start()
        lost = None
        while thread.is_alive() and lost is None:
            node, pid = busy_actor_node(cluster, workers)
            if node is None:
                time.sleep(0.1)
                continue
            cluster.remove_node(node)
            lost = {"at_s": round(time.perf_counter() - started, 2), "actor_pid": pid}
        thread.join()
        wall = time.perf_counter() - started
        import ray

        ray.shutdown()
        cluster.shutdown()
        ray_report = result.get("report")
        report = {
            "machine": machine_info(resolve_compute_type("auto", "cpu")),
            "files": len(items),
            "worker_nodes": args.nodes,
            "node_lost": lost,
            "ray_wall_s": round(wall, 2),
            "local": {"done": local.done, "failed": local.failed, "wall_s": round(local.wall_seconds, 2)},
            "ray": None if ray_report is None else {"done": ray_report.done, "failed": ray_report.failed},
            "error": result.get("error"),
            "errors_printed": err.getvalue().strip().splitlines(),
            "identical_text": ray_report is not None and texts(work / "ray") == texts(work / "local"),
            "outputs": len(texts(work / "ray")) if (work / "ray").exists() else 0,
        }
    write_report(report, args.out)
    ok = lost is not None and report["identical_text"] and report["ray"] == {"done": len(items), "failed": 0}
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
