"""The feature-level drafter (EAGLE-style): drafts from the target's own hidden states.

A feature draft is a ``DraftDecoder`` (models/draft.py) with a ``fuse`` layer: its input at
position q is fuse([H_{q-1}, embedding(x_q)]) + position, where H_{q-1} is the target's final-LN
hidden state one position back (the state that chose x_q), and zeros for the prompt's positions
(no state chose them). Its own final-LN output is its guess of H_q, which the next draft step reads
in place of the target's. fuse starts as [0 | I]: an untrained feature draft IS the draft decoder
on the same layers, and training can only add what the states tell. Training:
models/distill/feature_net.py.

Every verify pass computes the target's states of the rows it accepts
(``DecoderSession.hidden``); the speculative loop hands them to ``accept``. So each round
starts from the target's own view of the audio: the draft's cache holds one row per token
computed from the target's true state, and only the tokens drafted within a round read the
draft's guesses (they are dropped again at ``accept``).

    drafter = FeatureDrafter(draft, encoded.handle, rules, eot, target_cross)
"""

from typing import Sequence

import torch

from specscribe.models.draft import DraftDecoder, draft_token
from specscribe.models.drafters import Draft
from specscribe.models.interfaces import LogitRules
from specscribe.models.whisper import StateFuse


def initial_fuse(embedding: torch.Tensor) -> StateFuse:
    """fuse before training: [0 | I], the token embedding passed through and the state not read yet,
    so an untrained feature draft decodes exactly as the draft decoder on its layers; states are
    scaled to the rms of ``embedding`` (V, d), the target's token embedding."""
    d = embedding.shape[1]
    fuse = StateFuse(d, float(embedding.detach().float().pow(2).mean().sqrt()))
    with torch.no_grad():
        fuse.linear.weight.zero_()
        fuse.linear.weight[:, d:] = torch.eye(d)
        fuse.linear.bias.zero_()
    return fuse


def feature_draft_from(draft: DraftDecoder) -> DraftDecoder:
    """A feature draft on a draft decoder's layers (shared, not copied) with ``initial_fuse``."""
    ref = next(p for p in draft.decoder.layers.parameters() if p.is_floating_point())
    fuse = initial_fuse(draft.decoder.token_embedding.weight).to(device=ref.device, dtype=ref.dtype)
    target = draft.decoder  # only its shared parts (embedding, positions, final LN) are read
    out = DraftDecoder(target, list(draft.decoder.layers), draft.sources, fuse=fuse)
    out.vocab_ids = draft.vocab_ids  # its head is already draft's (reduced) one: target.proj above
    out.shared_cross_kv = draft.shared_cross_kv
    return out


class FeatureDrafter:
    """Drafts with a feature-level DraftDecoder over one window (greedy, or sampled with q at T > 0).

    Its cache follows prompt + generated: row i reads token i and the target's state that chose it
    (zeros for the prompt). Without the target's state for every generated token (a caller that
    does not pass features to ``accept``) it proposes nothing.
    """

    name = "feature"
    cheap = False  # a model: each proposed token is a draft step

    def __init__(
        self,
        draft: DraftDecoder,
        enc: torch.Tensor,
        rules: LogitRules | None = None,
        eot: int | None = None,
        target_cross: list | None = None,
        max_k: int = 8,
    ):
        if not draft.is_feature:
            raise ValueError("FeatureDrafter needs a feature-level draft (a checkpoint with a fuse layer)")
        self.draft, self.enc, self.rules, self.eot = draft, enc, rules, eot
        self.target_cross, self.max_k = target_cross, max_k
        self.session = None
        self._prompt: list[int] = []
        self._states: list[torch.Tensor] | None = []  # (d,) per generated token: the target state that chose it
        self._fed = 0  # cache rows computed from the target's states (or the prompt's zeros)
        self.temperature, self.generator = 0.0, None

    def begin(self, prompt: Sequence[int], temperature: float = 0.0, generator: torch.Generator | None = None) -> None:
        self.session = self.draft.session(self.enc, self.target_cross)
        self._prompt, self._states, self._fed = list(prompt), [], 0
        self.temperature, self.generator = temperature, generator

    def _true_states(self, start: int, end: int) -> torch.Tensor:
        """(end - start, d) the states rows start..end-1 of prompt + generated read: zeros for the prompt."""
        p, d = len(self._prompt), self.draft.decoder.positional_embedding.shape[1]
        zeros = torch.zeros(max(0, min(end, p) - start), d, dtype=self.session.dtype, device=self.enc.device)
        own = [s.to(zeros.dtype) for s in self._states[max(start, p) - p : end - p]]
        return torch.cat([zeros, torch.stack(own)]) if own else zeros

    def propose(self, generated: Sequence[int], k: int) -> Draft:
        assert self.session is not None, "begin() first"
        if self._states is None or len(self._states) < len(generated):
            return Draft(())
        seq = self._prompt + list(generated)
        k = min(k, self.max_k, self.draft.decoder.n_ctx - len(seq))
        if k <= 0:
            return Draft(())
        tokens_in, states_in = seq[self._fed :], self._true_states(self._fed, len(seq))  # at least the last token
        self._fed = len(seq)
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        for _ in range(k):
            head = self.session.forward(tokens_in, logits_from=len(tokens_in) - 1, features=states_in)[-1]  # (N,)
            token = draft_token(self.draft, head, self.rules, list(generated) + tokens, self.temperature, self.generator, probs)
            tokens.append(token)
            if token == self.eot or self.session.length >= self.draft.decoder.n_ctx:
                break
            tokens_in, states_in = [token], self.session.hidden[-1:]  # its own guess of the next state
        return Draft(tuple(tokens), torch.stack(probs) if probs else None)

    def accept(self, generated: Sequence[int], features: torch.Tensor | None = None) -> None:
        """features: (new, d) the target's states that chose the newly accepted tokens."""
        if self.session is None or self._states is None:
            return
        if features is None or len(self._states) + len(features) != len(generated):
            self._states = None  # lost track of the target's states: no more drafts this decode
            return
        self._states += list(features.detach())
        self.session.crop(self._fed)  # drop the rows drafted from its own guesses

    def finish(self) -> None:
        self.session, self._states = None, []
