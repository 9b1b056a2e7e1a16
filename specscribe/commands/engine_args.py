"""The model options every command shares (transcribe, live, serve), and the streaming options
of live and serve, defined once."""

from __future__ import annotations

import argparse
import math

COMPUTE_TYPES = ("auto", "float32", "bfloat16", "float16", "int8", "int8_float32")  # = models/compute.py


def add_engine_args(parser: argparse.ArgumentParser, device_flag: str = "--device") -> None:
    """Add the "model" argument group. ``device_flag`` lets `live` keep --device for the microphone."""
    g = parser.add_argument_group("model")
    g.add_argument("--engine", choices=("spec", "ct2"), default="spec",
                   help="spec: torch + speculative decoding (default); ct2: faster-whisper baseline")
    g.add_argument("--model", default="base", help="model name (specscribe models list) or CTranslate2 folder")
    g.add_argument(device_flag, dest="model_device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="where the model runs (default: auto)")
    g.add_argument("--compute-type", default="auto", choices=COMPUTE_TYPES,
                   help="auto: bf16 on CPUs with AMX/AVX512-BF16, else int8_float32 (int8 encoder + float32 "
                        "decoder) on x86, else float32; float16 on CUDA. int8: the decoder in int8 too")
    g.add_argument("--draft", default="auto", choices=("auto", "none", "decoder", "ngram"),
                   help="drafter for the spec engine (none: plain target greedy on the same engine)")
    g.add_argument("--draft-model", default=None, metavar="PATH", help="draft decoder checkpoint (safetensors)")
    g.add_argument("--draft-policy", default="measured", choices=("measured", "fixed"),
                   help="with --draft auto: measured picks each decode's drafter (previous hypothesis, draft "
                   "decoder, n-gram or none) by measured speed; fixed by a fixed rule (default: %(default)s)")
    g.add_argument("--threads", type=int, default=0, help="CPU threads for the model (0: library default)")
    g.add_argument("--pass-rows", type=_pass_rows, default=0, metavar="N", help="spec engine: rows per block of a "
                   "target pass (0: by CPU and compute type; docs/ARCHITECTURE.md)")
    g.add_argument("--query-block", type=_query_block, default=0, metavar="N", help="spec engine: attention query "
                   "rows per call of a target pass, 1-64 dividing 64 (0: by CPU and compute type)")
    g.add_argument("--row-calls", default="auto", choices=("auto", "blocks"), help="spec engine: auto runs a target "
                   "pass's linears over all its rows at once where a probe finds this CPU gives each row the same "
                   "bits at any multiple of --pass-rows rows, else in blocks of --pass-rows; blocks: always blocks "
                   "(default: %(default)s)")
    g.add_argument("--adapt-draft", action="store_true",
                   help="keep training the draft on the target's own outputs in idle time (speed only: "
                   "the text never changes; docs/draft_model.md)")
    g.add_argument("--adapt-save", default=None, metavar="PATH",
                   help="with --adapt-draft: write each adapted draft that is swapped in here (load it with --draft-model)")


def _pass_rows(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _query_block(text: str) -> int:
    value = int(text)
    if value < 0 or value > 64 or (value and 64 % value):  # PassShape: it divides the key block (64)
        raise argparse.ArgumentTypeError("must be 0 or a divisor of 64 (1, 2, 4 ... 64)")
    return value


def engine_options(args: argparse.Namespace):
    """The EngineOptions named by the arguments of add_engine_args."""
    from specscribe.models.engines import EngineOptions

    return EngineOptions(
        engine=args.engine, model=args.model, device=args.model_device, compute_type=args.compute_type,
        draft=args.draft, draft_model=args.draft_model, draft_policy=args.draft_policy, threads=args.threads,
        pass_rows=args.pass_rows, query_block=args.query_block, row_calls=args.row_calls,
        adapt_draft=args.adapt_draft, adapt_save=args.adapt_save,
    )


def add_streaming_args(group) -> None:
    """--update-interval, --agree-gap, --settle-after, --encoder-pad, --loaded-encoder-pad and --pause-commit
    (StreamOptions), for live and serve."""
    group.add_argument("--update-interval", type=float, default=0.5, help="seconds of audio between updates")
    group.add_argument("--agree-gap", type=float, default=0.0, metavar="SECONDS",
                       help="a word is final once two hypotheses at least this much audio apart agree on it "
                       "(0: two successive updates; useful with a short --update-interval)")
    group.add_argument("--settle-after", type=float, default=4.0, metavar="SECONDS",
                       help="a word is final once this much audio has followed it, even if the hypotheses still "
                       "disagree on it (bounds how late a final comes on a slow CPU; 0: agreement only; "
                       "default: %(default)s)")
    group.add_argument("--encoder-pad", type=float, default=5.0, metavar="SECONDS",
                       help="each update encodes the buffer plus this much padding instead of a 30 s window "
                       "(faster; 30 = the full window, as batch transcription; default: %(default)s)")
    group.add_argument("--loaded-encoder-pad", type=float, default=2.0, metavar="SECONDS",
                       help="while the model cannot keep up (load level 2 and up), decodes encode at most this much "
                       "padding, a cheaper encode for every session (0: --encoder-pad at every level; default: "
                       "%(default)s)")
    group.add_argument("--pause-commit", type=float, default=0.0, metavar="SECONDS",
                       help="after this much silence (e.g. 0.3) the words so far are final, before the VAD ends "
                       "the utterance (0: wait for its end, the default)")


def check_engine_args(args) -> str | None:
    """What is wrong with the add_engine_args flags that argparse does not check, in the words of the error to
    print; None if nothing (`transcribe` checks --threads with its own flags)."""
    if args.threads < 0:
        return "--threads must be 0 (the library default) or more"
    return None


def non_finite(args, flags) -> str | None:
    """The error for the first of these float flags that is nan or inf, else None. Range checks written as
    `value < 0` let nan through (every comparison with it is false), and it fails later with a traceback."""
    for flag in flags:
        value = getattr(args, flag)
        if not math.isfinite(value):
            return f"--{flag.replace('_', '-')} must be a finite number, got {value}"
    return None


def check_streaming_args(args) -> str | None:
    """What is wrong with the add_streaming_args flags, in the words of the error to print; None if nothing."""
    if (problem := non_finite(args, ("update_interval", "agree_gap", "settle_after", "encoder_pad",
                                     "loaded_encoder_pad", "pause_commit"))) is not None:
        return problem
    if not 0 < args.update_interval <= 5:
        return "--update-interval must be in (0, 5] seconds"
    if not 0 <= args.agree_gap <= 5:
        return "--agree-gap must be in [0, 5] seconds"
    for flag in ("settle_after", "encoder_pad", "loaded_encoder_pad", "pause_commit"):
        if getattr(args, flag) < 0:
            return f"--{flag.replace('_', '-')} must be 0 or more"
    return None


def seconds_or_off(seconds: float) -> float | None:
    """A StreamOptions duration from a flag where 0 means off (--settle-after, --loaded-encoder-pad, --pause-commit):
    None for 0."""
    return seconds if seconds > 0 else None
