"""Distilling the default draft decoder from the target Whisper model.

Stages (each one a module, each driven by ``scripts/distill_draft.py``):

- ``text``: sentences from offline sources (Debian fortunes, licence texts, gettext catalogues);
- ``synth``: text-to-speech backends (espeak-ng, festival, piper) with speed and pitch variation;
- ``data``: the training set (16 kHz WAVs + ``manifest.jsonl``), built reproducibly from a seed;
- ``labels``: the target's greedy pseudo-labels, its top-k logits and its cached encoder outputs;
- ``train``: KL + cross-entropy training of the draft decoder, with validation acceptance.

The real clips of ASSETS.md are the evaluation set and never enter training.
"""
