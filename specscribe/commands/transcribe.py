"""`specscribe transcribe FILE_OR_DIR... [options]`: batch transcription to txt/srt/vtt/json/tsv."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specscribe.commands.engine_args import add_engine_args, engine_options

DEFAULT_BATCH_SIZE = 16  # = pipeline.batch.DEFAULT_BATCH_SIZE (not imported here: the parser stays light)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "transcribe",
        help="transcribe audio/video files or folders to txt, srt, vtt, json or tsv",
        description="Transcribe (or translate to English) audio and video files. Folders are walked "
        "recursively; '-' reads stdin. A bad file gets one error line and the batch goes on; "
        "the exit status is non-zero if any file failed.",
    )
    p.add_argument("inputs", nargs="+", metavar="FILE_OR_DIR", help="files, folders, or - for stdin")
    add_engine_args(p)
    d = p.add_argument_group("decoding")
    d.add_argument("--language", default="auto", help="ISO code such as en or de; auto detects once per file")
    d.add_argument("--task", default="transcribe", choices=("transcribe", "translate", "both"),
                   help="translate: to English; both: transcript and translation from one encoding")
    d.add_argument("--word-timestamps", action="store_true", help="align words (json words, subtitle cues)")
    d.add_argument("--initial-prompt", default=None, help="text to condition the first window on")
    d.add_argument("--hotwords", default="", metavar="TEXT",
                   help="words to favour, e.g. \"Kubernetes, Dvořák\" (faster-whisper's hotwords: a prompt per window)")
    d.add_argument("--multilingual", action="store_true",
                   help="detect the language of every window (mixed-language audio); json segments carry it")
    s = p.add_argument_group("search (faster-whisper's options)")
    s.add_argument("--beam-size", type=int, default=1, metavar="N",
                   help="beam search width; 1 = greedy, the default (faster-whisper's default is 5)")
    s.add_argument("--patience", type=float, default=1.0, help="beam search stops after beam-size x patience hypotheses")
    s.add_argument("--length-penalty", type=float, default=1.0,
                   help="hypotheses rank by log-probability / length ** this (0: by log-probability)")
    s.add_argument("--best-of", type=int, default=5, metavar="N",
                   help="samples per temperature-fallback decode, the best kept (default: %(default)s)")
    s.add_argument("--n-best", type=int, default=1, metavar="K",
                   help="json: each segment lists K alternatives, best first (K <= --beam-size)")
    o = p.add_argument_group("output")
    o.add_argument("--output-format", "-f", default="txt",
                   help="txt, srt, vtt, json, tsv or all; a comma list is fine (default: txt)")
    o.add_argument("--output-dir", "-o", default=".", help="folder for the outputs (default: current folder)")
    o.add_argument("--max-line-width", type=int, default=42, help="characters per subtitle line")
    o.add_argument("--max-line-count", type=int, default=2, help="lines per subtitle cue (0: no limit)")
    o.add_argument("--window-stats", action="store_true", help="per-window statistics in the json")
    r = p.add_argument_group("run")
    r.add_argument("--skip-existing", action="store_true", help="skip inputs whose outputs all exist (resume)")
    r.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="windows decoded together, sharing each model pass: across files, and across "
                   "stretches of a long file (each conditioned on its own text); 1 = one window at a time, "
                   "in order (default: %d)" % DEFAULT_BATCH_SIZE)
    r.add_argument("--workers", type=int, default=1,
                   help="processes (with --ray: Ray actors), each with its own model (default: %(default)s)")
    r.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run through Ray Data: 'local' starts Ray on this machine, else a cluster address "
                   "('auto', 'ray://head:10001'); the output folder must be shared by every node "
                   "(needs the ray extra: pip install 'specscribe[ray]')")
    r.add_argument("--quiet", "-q", action="store_true", help="no progress bars and no summary")
    p.set_defaults(func=run)


def _fail(message: str, code: int = 2) -> int:
    print(f"specscribe: error: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    from specscribe.pipeline.batch import BatchOptions, run_batch, summary_line
    from specscribe.pipeline.inputs import collect_inputs
    from specscribe.pipeline.longform import LongformOptions
    from specscribe.pipeline.writers import WriterOptions, parse_formats

    try:
        formats = parse_formats(args.output_format)
    except ValueError as exc:
        return _fail(str(exc))
    batch_size = DEFAULT_BATCH_SIZE if args.batch_size is None else args.batch_size
    if args.workers < 1 or args.max_line_width < 1 or batch_size < 1 or args.max_line_count < 0 or args.threads < 0:
        return _fail("--workers, --batch-size and --max-line-width must be >= 1; --max-line-count and --threads >= 0")
    from specscribe.commands.engine_args import non_finite

    if problem := non_finite(args, ("patience", "length_penalty")):  # nan passed `patience <= 0`, then a traceback
        return _fail(problem)
    if args.beam_size < 1 or args.best_of < 1 or args.n_best < 1 or args.patience <= 0:
        return _fail("--beam-size, --best-of and --n-best must be >= 1, --patience > 0")
    if args.n_best > args.beam_size:
        return _fail(f"--n-best {args.n_best} needs --beam-size {args.n_best} or more (the alternatives are beams)")
    language = None if args.language in ("auto", "", None) else args.language.lower()
    if args.multilingual and language is not None:
        return _fail("--multilingual detects the language of every window: leave out --language")
    if language is not None:
        from faster_whisper.tokenizer import _LANGUAGE_CODES  # Whisper's 100 codes

        if language not in _LANGUAGE_CODES:
            return _fail(f"unknown language {args.language!r}; use an ISO code such as en, de, fr, or auto")

    stdin = sys.stdin.buffer.read() if "-" in args.inputs else None
    items, errors = collect_inputs(args.inputs, stdin)
    for message in errors:
        print(f"specscribe: error: {message}", file=sys.stderr)

    options = BatchOptions(
        engine=engine_options(args),
        longform=LongformOptions(
            language=language, task=args.task, word_timestamps=args.word_timestamps,
            initial_prompt=args.initial_prompt, beam_size=args.beam_size, patience=args.patience,
            length_penalty=args.length_penalty, best_of=args.best_of, n_best=args.n_best,
            multilingual=args.multilingual, hotwords=args.hotwords,
        ),
        writer=WriterOptions(
            max_line_width=args.max_line_width, max_line_count=args.max_line_count,
            word_timestamps=args.word_timestamps, window_stats=args.window_stats,
        ),
        formats=formats,
        output_dir=Path(args.output_dir),
        skip_existing=args.skip_existing,
        workers=args.workers,
        quiet=args.quiet,
        batch_size=batch_size,
    )
    if args.ray is not None:
        try:
            from specscribe.pipeline.ray_batch import RayOptions, run_ray_batch, import_ray

            import_ray()
        except ImportError as exc:
            return _fail(str(exc))
        report = run_ray_batch(items, options, RayOptions(address=args.ray, workers=args.workers))
    else:
        report = run_batch(items, options)  # ModelError propagates: the CLI prints one line, exit 1
    if not args.quiet:
        print(summary_line(report), file=sys.stderr)
    return 1 if (errors or report.failed) else 0
