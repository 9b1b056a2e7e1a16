"""Normalized WER of specscribe transcripts against the evaluation clips' references.

Two ways to use it:

    # score .txt outputs already written by `specscribe transcribe ... -f txt -o DIR`
    python scripts/eval_wer.py --outputs DIR

    # transcribe jfk.flac and the LibriVox clips now, with an engine, and score them
    nice -n 10 python scripts/eval_wer.py --engine ct2

Prints JSON: per-clip WER, the corpus WER (total edits / total reference words) and the
normalized texts. The normalizer is specscribe.pipeline.wer (shared with the tests). A clip
without a transcript in --outputs counts as all deletions (an empty transcript, `missing: true`)
and the exit status is then 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def references() -> dict[Path, str]:
    from specscribe.clips import JFK_TEXT, clips_dir, librivox_clips

    refs = {clips_dir() / "jfk.flac": JFK_TEXT}
    refs.update(librivox_clips())
    return refs


def hypotheses_from_outputs(folder: Path, refs: dict[Path, str]) -> tuple[dict[Path, str], set[Path]]:
    """Every clip's transcript from folder, and the clips that have none (scored as empty)."""
    out, missing = {}, set()
    for path in refs:
        txt = folder / f"{path.stem}.txt"
        if txt.is_file():
            out[path] = txt.read_text()
        else:
            print(f"eval_wer: no {txt}: scored as an empty transcript (all deletions)", file=sys.stderr)
            out[path], missing = "", missing | {path}
    return out, missing


def hypotheses_from_engine(engine: str, model: str, refs: dict[Path, str]) -> dict[Path, str]:
    from specscribe.models.engines import EngineOptions, load_transcriber
    from specscribe.pipeline.audio import load_audio
    from specscribe.pipeline.longform import LongformOptions, transcribe_audio

    transcriber = load_transcriber(EngineOptions(engine=engine, model=model))
    return {p: transcribe_audio(transcriber, load_audio(p), LongformOptions()).text for p in refs}


def main(argv: list[str] | None = None) -> int:
    from specscribe.pipeline.wer import corpus_wer, normalize, wer

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--outputs", type=Path, help="folder of <stem>.txt transcripts")
    p.add_argument("--engine", choices=("spec", "ct2"), help="transcribe the clips now with this engine")
    p.add_argument("--model", default="base")
    args = p.parse_args(argv)
    if not args.outputs and not args.engine:
        p.error("give --outputs DIR or --engine NAME")
    refs = references()
    if args.outputs:
        hyps, missing = hypotheses_from_outputs(args.outputs, refs)
    else:
        hyps, missing = hypotheses_from_engine(args.engine, args.model, refs), set()
    clips = [
        {"clip": path.name, "wer": round(wer(refs[path], hyp), 4), "missing": path in missing,
         "reference": normalize(refs[path]), "hypothesis": normalize(hyp)}
        for path, hyp in hyps.items()
    ]
    result = {"corpus_wer": round(corpus_wer([refs[p] for p in hyps], list(hyps.values())), 4), "clips": clips}
    print(json.dumps(result, indent=2))
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
