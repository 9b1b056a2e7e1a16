"""Every scripts/bench_*.py still runs: each at its smallest settings, on the real model and clips,
writes a JSON with machine info and positive timings. Adding a script is one BENCHES entry.

Not a benchmark: the numbers are not checked against anything (the machine may be busy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _auto_compute_type() -> str:
    from specscribe.models.compute import resolve_compute_type

    return resolve_compute_type("auto", "cpu")


# (script, its arguments besides --out): one entry per script, the smallest run that covers it all
BENCHES = [
    (
        "bench_engines.py",
        ["--repeat", "1", "--threads", "2", "--clips", "jfk", "--rows", "1,4", "--seqs", "1,2", "--batches", "1,2",
         "--prompts", "4,20", "--compute-types", _auto_compute_type()],
    ),
    ("bench_batch.py", ["--repeat", "1", "--no-physics", "--files", "1", "--batch-sizes", "2", "--beam", "2",
                        "--variant", "shape8x4=--pass-rows 8 --query-block 4"]),
    ("bench_startup.py", ["--repeat", "1", "--cold", "0"]),
    ("bench_speculative.py", ["--repeat", "1", "--clips", "jfk"]),
    ("bench_streaming.py", ["--clips", "jfk", "--configs", "spec", "--repeat", "1", "--offsets", "0,0.2",
                            "--speed", "2"]),
    ("bench_server.py", ["--clients", "2", "--configs", "spec", "--stream-seconds", "3"]),
    ("bench_encoder.py", ["--repeat", "1", "--windows", "6", "--batches", "1,2", "--packing", "--compute-type", "float32",
                          "--versus", "float32,int8_float32"]),
    ("eval_compute_types.py", ["--sides", "float32,int8_float32", "--clips", "jfk"]),
    # local sides only: Ray costs ~25 s of start-up a run, and tests/integration/test_ray_batch.py runs it
    ("bench_scaleout.py", ["--repeat", "1", "--no-physics", "--files", "2", "--ray-sides", ""]),
    ("bench_align.py", ["--repeat", "1", "--seconds", "4"]),
    ("bench_redecode.py", ["--set", "librivox", "--clips", "0870", "--repeat", "1"]),
]

_outputs: dict[str, dict] = {}


def run_bench(script: str, args: list[str], folder: Path) -> dict:
    """The script's JSON (run once per session, then cached for the checks of its own test)."""
    if script not in _outputs:
        out = folder / (Path(script).stem + ".json")
        proc = subprocess.run(
            [sys.executable, str(SCRIPTS / script), *args, "--out", str(out)],
            capture_output=True, text=True, timeout=300, check=False,
        )
        assert proc.returncode == 0, f"{script} failed:\n{proc.stderr[-3000:]}"
        _outputs[script] = json.loads(out.read_text())
    return _outputs[script]


def numbers(node) -> list[float]:
    """Every number in a JSON tree (booleans left out)."""
    if isinstance(node, dict):
        return [x for v in node.values() for x in numbers(v)]
    if isinstance(node, list):
        return [x for v in node for x in numbers(v)]
    return [node] if isinstance(node, (int, float)) and not isinstance(node, bool) else []


@pytest.mark.parametrize("script, args", BENCHES, ids=[b[0] for b in BENCHES])
def test_bench_script_runs_and_reports_its_machine(script, args, tmp_path_factory):
    report = run_bench(script, args, tmp_path_factory.mktemp("bench"))
    machine = report["machine"]
    assert machine["cpu_model"] and machine["cores"] >= 1 and machine["compute_type"]
    assert any(x > 0 for x in numbers(report))


def test_bench_batch_sections(tmp_path_factory):
    script, args = next(b for b in BENCHES if b[0] == "bench_batch.py")
    report = run_bench(script, args, tmp_path_factory.mktemp("bench"))
    assert set(report["sides"]) == {"specscribe_b2", "fw_transcribe", "fw_batched", "specscribe_b2_beam2",
                                    "fw_transcribe_beam2", "specscribe_b2_shape8x4"}
    assert report["variants"] == {"specscribe_b2_shape8x4": ["--pass-rows", "8", "--query-block", "4"]}
    assert [f["file"] for f in report["files"]] == ["jfk.flac"]  # --files 1
    assert all(side["wall_s_median"] > 0 and side["wer_scored"] < 0.1 for side in report["sides"].values())
    assert report["beam"]["width"] == 2 and report["beam"]["speedup_over_fw_transcribe"] > 0


def test_bench_engines_sections(tmp_path_factory):
    script, args = next(b for b in BENCHES if b[0] == "bench_engines.py")
    report = run_bench(script, args, tmp_path_factory.mktemp("bench"))
    ct = _auto_compute_type()
    assert report["machine"]["compute_types"] == [ct]

    passes = report["pass_ms"]
    assert passes["block_rows"][ct] >= 1
    for table, sizes in (("by_rows", ("1", "4")), ("by_sequences", ("1", "2")), ("by_prompt", ("4", "20"))):
        for mode in ("invariant", "plain"):
            for n in sizes:
                cell = passes[table][ct][mode][n]
                assert 0 < cell["min"] <= cell["median"] and cell["n"] >= 1

    throughput = report["throughput"]
    assert isinstance(throughput["identical"], bool)  # recorded by the script; lossless is test_batch_decode's
    for b in ("1", "2"):
        for variant in ("drafts", "none"):
            row = throughput["by_batch"][b][variant]
            assert row["tokens"] > 0 and row["tokens_per_s"]["best"] > 0 and row["passes"] > 0
            assert 0 < row["sequences_per_pass"] <= int(b) and row["rows_per_pass"] >= row["sequences_per_pass"]
    assert throughput["by_batch"]["1"]["none"]["drafted"] == 0

    engines = report["engines"]
    jfk = engines["clips"]["jfk"]
    assert jfk["spec_ms"]["median"] > 0 and jfk["ct2_ms"]["median"] > 0 and jfk["spec_tokens"] > 0
    breakdown = jfk["spec_breakdown_ms"]
    assert breakdown["n_steps"] > 0 and breakdown["ms_per_step"] > 0 and breakdown["prompt_passes"] > 0
    assert breakdown["encoder"] > 0 and breakdown["language_detection"] > 0


def test_bench_speculative_sections(tmp_path_factory):
    from specscribe.models.spec_engine import HYPOTHESIS_K

    script, args = next(b for b in BENCHES if b[0] == "bench_speculative.py")
    report = run_bench(script, args, tmp_path_factory.mktemp("bench"))
    assert report["config"]["hypothesis_k"] == HYPOTHESIS_K
    jfk = report["clips"]["jfk"]
    assert {"none", "auto", "ngram", "decoder", "random"} <= set(jfk["drafters"])
    for row in jfk["drafters"].values():
        timing = row["decode_ms_timing"]
        assert 0 < timing["min"] <= timing["median"] and timing["n"] == 1
        assert row["same_as_reference"] and row["tokens"] > 0
    assert jfk["drafters"]["none"]["drafted"] == 0
    stream = report["streaming"]["jfk"]
    assert stream["same_as_plain"] and stream["hypothesis_accepted"] > 0
    assert stream["hypothesis_tokens_per_target_pass"] > 1  # a hypothesis run of more than one token per pass
    assert report["near_ties"]["decodes"] == 12


def test_bench_streaming_sections(tmp_path_factory):
    script, args = next(b for b in BENCHES if b[0] == "bench_streaming.py")
    report = run_bench(script, args, tmp_path_factory.mktemp("bench"))
    spec = report["results"]["spec"]
    assert spec["engine"] == "spec" and spec["hold_unsure"] is True and len(spec["rounds"]) == 1
    assert 0 < spec["partial_median"] and 0 < spec["final_median"] <= spec["final_p90"]
    run = spec["rounds"][0]
    assert run["audio_s"] > 10 and run["final_median"] == spec["final_median"]
    assert run["clips"]["jfk@0"]["words_matched"] > 0 and run["tokens_per_target_pass"] > 1
    assert set(run["clips"]) == {"jfk@0", "jfk@0.2"}  # --offsets: the clip once per start offset
    assert run["audio_s"] > 2 * 10.9 and set(run["wer_goal_gap_mean_over_offsets"]) == {"jfk"}
    # --speed 2: compute charged at half, so the model's share of the (virtual) clock is below its wall share
    assert report["speed"] == 2.0 and 0 < run["rtf_charged"] < run["rtf_model_thread_wall"]


def test_bench_server_sections(tmp_path_factory):
    script, args = next(b for b in BENCHES if b[0] == "bench_server.py")
    report = run_bench(script, args, tmp_path_factory.mktemp("bench"))
    (level,) = report["configs"]["spec"]["levels"]
    assert level["clients"] == 2 and level["refused"] == 0 and level["lost"] == 0 and level["mixed_up"] == 0
    assert level["finals"] > 0 and 0 < level["latency_median"] <= level["latency_p90"]
    assert level["server_cpu_cores"] > 0 and level["server_rss_peak_mb"] > 0 and level["load_level_max"] is not None
    assert all(c["wer"] <= 0.5 for c in level["per_client"])


def test_bench_encoder_sections(tmp_path_factory):
    script, args = next(b for b in BENCHES if b[0] == "bench_encoder.py")
    report = run_bench(script, args, tmp_path_factory.mktemp("bench"))
    assert [(r["window_s"], r["batch"], r["encoder"]) for r in report["rows"]] == [
        (6.0, 1, "engine"), (6.0, 1, "plain"), (6.0, 1, "float32"), (6.0, 1, "int8_float32"), (6.0, 2, "engine")]
    assert all(0 < r["s_per_window_min"] <= r["s_per_window_median"] for r in report["rows"])
    assert [p["window_s"] for p in report["packing"]] == [6.0] and report["packing"][0]["plain_over_engine"] > 0
    assert set(report["attention_ms"]) == {"strided", "contiguous"} and min(report["attention_ms"].values()) > 0
    assert [v["window_s"] for v in report["versus"]] == [6.0] and report["versus"][0]["float32_over_int8_float32"] > 0


def test_eval_compute_types_sections(tmp_path_factory):
    script, args = next(b for b in BENCHES if b[0] == "eval_compute_types.py")
    report = run_bench(script, args, tmp_path_factory.mktemp("bench"))
    jfk = report["clips"]["jfk.flac"]["sides"]
    assert report["sides"] == ["float32", "int8_float32"] and report["clips_total"] == 1
    assert jfk["float32"]["wer"] == 0 and jfk["int8_float32"]["wer"] == 0  # both hear JFK word for word
    assert jfk["int8_float32"]["same_text_as_float32"] and jfk["int8_float32"]["language"] == "en"
    assert report["summary"]["int8_float32"]["clips_with_the_same_text_as_float32"] == 1


def test_bench_redecode_sections(tmp_path_factory):
    script, args = next(b for b in BENCHES if b[0] == "bench_redecode.py")
    report = run_bench(script, args, tmp_path_factory.mktemp("bench"))
    assert report["clips"] == ["librivox/0870"] and report["redecodes"] > 0 and report["same_tokens"]
    assert set(report["seconds"]) == {"additive", "multiplicative"} and min(report["median_s"].values()) > 0
    assert all(t["tokens"] > 0 and t["accepted"] <= t["drafted"] for t in report["totals"].values())


def test_bench_align_sections(tmp_path_factory):
    script, args = next(b for b in BENCHES if b[0] == "bench_align.py")
    report = run_bench(script, args, tmp_path_factory.mktemp("bench"))
    windows = report["windows"]
    assert {"jfk", "physicsworks@20s+4s"} <= set(windows) and all(w["tokens"] > 0 for w in windows.values())
    # the timed parts are inside the whole call
    assert all(0 < w["dtw"] + w["median_filter"] < w["total"] for w in windows.values())
    assert 0 < report["post_share"] < 1


def test_bench_scaleout_sections(tmp_path_factory):
    script, args = next(b for b in BENCHES if b[0] == "bench_scaleout.py")
    report = run_bench(script, args, tmp_path_factory.mktemp("bench"))
    assert set(report["sides"]) == {"local_small", "local_full"}  # --ray-sides ""
    assert all(side["wall_s_median"] > 0 for side in report["sides"].values())
    assert report["folders"]["full"]["files"] == 2 and report["folders"]["small"]["files"] == 1  # --files 2
    assert report["ray_overhead"] == {}


def test_bench_engines_sections_follow_the_device():
    """kernels needs CUDA; engines (faster-whisper int8) the CPU: each refused where it cannot run."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_engines", SCRIPTS / "bench_engines.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for argv in (["--device", "cuda", "--sections", "engines"], ["--sections", "kernels"]):
        with pytest.raises(SystemExit):
            bench.parse_args(argv)
    assert bench.parse_args(["--device", "cuda", "--sections", "pass_ms,kernels"]).sections == ["pass_ms", "kernels"]
    assert bench.parse_args([]).sections == ["pass_ms", "throughput", "engines"]
