"""An EleutherAI lm-evaluation-harness (0.4.x) ``LM`` that runs a TransformerLens model: a ``HookedTransformer``
(TransformerLens 3.9) or a ``TransformerBridge`` (4.3), the name kept for both.

- ``loglikelihood``: requests sharing a context whose continuations are single tokens (multiple-choice
  letters) are scored with one forward pass of the context, and contexts that share a few-shot prefix
  run it once into the backend's key/value cache (:func:`circuits.models.forward.end_residuals`); others are scored on ``context +
  continuation`` in length-sorted, right-padded batches. Only the positions whose log-probabilities are
  needed are unembedded (the full ``[batch pos d_vocab]`` logits of long few-shot prompts would take GBs).
- ``loglikelihood_rolling``: lm-eval's rolling windows over the model's context (EOS as the prefix token).
- ``generate_until``: greedy, batched with left padding, an attention mask and a key/value cache
  (TransformerLens's on 3.9, Hugging Face's on a Bridge); stops at any ``until`` string or ``max_gen_toks``.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from jaxtyping import Float, Int
from lm_eval.api.model import LM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from torch import Tensor
from circuits.models.backend import Model

from circuits.models.forward import end_residuals, length_batches, pad_token_id, shared_prefix_lengths, unembed_end


class HookedTransformerLM(LM):
    def __init__(
        self,
        model: Model,
        batch_size: int = 8,
        max_length: int | None = None,
        max_gen_toks: int = 256,
        min_shared_prefix: int | None = 32,
    ):
        """``min_shared_prefix``: contexts that share at least this many leading tokens (a few-shot part)
        run them once into a key/value cache; ``None`` turns sharing off."""
        super().__init__()
        if model.tokenizer is None:
            raise ValueError("HookedTransformerLM needs a model with a tokenizer")
        self.model = model
        self.tokenizer = model.tokenizer
        self.batch_size = batch_size
        self.max_length = max_length or model.cfg.n_ctx
        self.max_gen_toks = max_gen_toks
        self.min_shared_prefix = min_shared_prefix
        self._device = model.cfg.device
        eos = self.tokenizer.eos_token_id
        self.prefix_token_id = eos if eos is not None else (self.tokenizer.bos_token_id or 0)
        self.pad_token_id = pad_token_id(self.tokenizer)

    # --- helpers -------------------------------------------------------------------------------

    def tok_encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        # As lm-eval's HF model: trailing spaces of the context belong to the continuation.
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        ctx = self.tok_encode(context) if context else [self.prefix_token_id]
        return ctx, self.tok_encode(continuation)

    @torch.no_grad()
    def _final_resid(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_model"]:
        """Residual stream after the last block (before the final norm)."""
        return self.model.backend.final_residual(tokens.to(self._device))

    def _log_probs_at(self, resid: Float[Tensor, "n d_model"]) -> Float[Tensor, "n d_vocab"]:
        """Final norm + unembedding (+ final-logit soft-cap) of just the selected positions."""
        return torch.log_softmax(unembed_end(self.model, resid), dim=-1)

    @torch.no_grad()
    def score_tokens(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """Sum log-prob of each continuation given its context, and whether greedy decoding yields it."""
        results: list[tuple[float, bool] | None] = [None] * len(pairs)
        # Pairs with the same context and one-token continuations share one forward pass.
        by_context: dict[tuple[int, ...], list[int]] = defaultdict(list)
        multi: list[int] = []
        for i, (ctx, cont) in enumerate(pairs):
            if len(cont) == 1 and len(ctx) <= self.max_length:
                by_context[tuple(ctx)].append(i)
            else:
                multi.append(i)
        contexts = list(by_context)
        prefixes = shared_prefix_lengths(contexts, self.min_shared_prefix) if self.min_shared_prefix else None
        last = end_residuals(self.model, contexts, prefixes, batch_size=self.batch_size)
        for start in range(0, len(contexts), 256):  # unembed a bounded number of rows at a time
            logp = self._log_probs_at(last[start : start + 256])
            for row, ctx in enumerate(contexts[start : start + 256]):
                greedy = int(logp[row].argmax())
                for i in by_context[ctx]:
                    tok = pairs[i][1][0]
                    results[i] = (float(logp[row, tok]), greedy == tok)
        multi.sort(key=lambda i: len(pairs[i][0]) + len(pairs[i][1]), reverse=True)
        lengths = [min(len(pairs[i][0]) + len(pairs[i][1]) - 1, self.max_length) for i in multi]
        for batch in length_batches(lengths, self.batch_size):
            idx = multi[batch.start : batch.stop]
            seqs, spans = [], []
            for i in idx:
                ctx, cont = pairs[i]
                full = (ctx + cont)[-(self.max_length + 1):][:-1]
                seqs.append(full)
                spans.append((len(full) - len(cont), len(cont)))
            tokens = self._pad_right(seqs)
            resid = self._final_resid(tokens)
            rows = torch.cat([torch.full((n,), r) for r, (_, n) in enumerate(spans)])
            cols = torch.cat([torch.arange(s, s + n) for s, n in spans])
            logp = self._log_probs_at(resid[rows, cols])
            offset = 0
            for i, (_, n) in zip(idx, spans):
                target = torch.tensor(pairs[i][1], device=logp.device)
                part = logp[offset : offset + n]
                results[i] = (float(part.gather(-1, target[:, None]).sum()), bool((part.argmax(-1) == target).all()))
                offset += n
        return results  # type: ignore[return-value]

    def _pad_right(self, seqs: list[list[int]]) -> Int[Tensor, "batch pos"]:
        # Right padding needs no attention mask: causal attention never looks at later pads.
        length = max(len(s) for s in seqs)
        out = torch.full((len(seqs), length), self.pad_token_id, dtype=torch.long)
        for r, s in enumerate(seqs):
            out[r, : len(s)] = torch.tensor(s, dtype=torch.long)
        return out

    # --- the LM interface --------------------------------------------------------------------------

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        return self.score_tokens([self._encode_pair(*req.args) for req in requests])

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        # Windows of all documents are scored together, so short documents share batches.
        windows, owner = [], []
        for r, req in enumerate(requests):
            (text,) = req.args
            for w in get_rolling_token_windows(self.tok_encode(text), self.prefix_token_id, self.max_length, 1):
                windows.append(make_disjoint_window(w))
                owner.append(r)
        out = [0.0] * len(requests)
        for r, (lp, _) in zip(owner, self.score_tokens(windows)):
            out[r] += lp
        return out

    @torch.no_grad()
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        results: list[str | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, req in enumerate(requests):
            kwargs = dict(req.args[1])
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            groups[(tuple(until), int(kwargs.get("max_gen_toks", self.max_gen_toks)))].append(i)
        for (until, max_new), idx in groups.items():
            idx.sort(key=lambda i: len(requests[i].args[0]), reverse=True)
            # Characters / 3 over-estimates tokens for English text: a safe length for the batch budget.
            lengths = [len(requests[i].args[0]) // 3 + max_new for i in idx]
            for batch in length_batches(lengths, self.batch_size):
                chunk = idx[batch.start : batch.stop]
                texts = self.generate_greedy([requests[i].args[0] for i in chunk], max_new, list(until))
                for i, t in zip(chunk, texts):
                    results[i] = t
        return results  # type: ignore[return-value]

    @torch.no_grad()
    def generate_greedy(self, prompts: list[str], max_new_tokens: int, until: list[str]) -> list[str]:
        """Greedy continuation of each prompt (batched, left-padded, KV cache), cut at the first ``until``. The
        forward passes are the model's backend's (:meth:`~circuits.models.backend.Backend.decoder`): on 3.9 TransformerLens's
        cache; on a TransformerBridge Hugging Face's ``DynamicCache`` (each row's positions counted from its first
        real token), or the grown prompts rerun where that cache does not give the full run's numbers
        (:meth:`~circuits.models.backend.Backend.prefix_sharing`: transformers 5.24)."""
        eos = self.tokenizer.eos_token_id
        encoded = [self.tok_encode(p)[-(self.max_length - max_new_tokens):] or [self.prefix_token_id] for p in prompts]
        length = max(len(e) for e in encoded)
        tokens = torch.full((len(encoded), length), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(encoded), length), dtype=torch.long)
        for r, e in enumerate(encoded):
            tokens[r, length - len(e):] = torch.tensor(e)
            mask[r, length - len(e):] = 1
        generated: list[list[int]] = [[] for _ in encoded]
        done = [False] * len(encoded)
        steps = self.model.backend.decoder(tokens.to(self._device), mask.to(self._device))
        for _ in range(max_new_tokens):
            resid = steps.residual()
            next_tok = self._log_probs_at(resid[:, -1]).argmax(-1)
            for r, t in enumerate(next_tok.tolist()):
                if done[r]:
                    continue
                generated[r].append(t)
                text = self.tokenizer.decode(generated[r])
                if t == eos or any(u in text for u in until):
                    done[r] = True
            if all(done):
                break
            steps.append(next_tok)
        out = []
        for g in generated:
            text = self.tokenizer.decode([t for t in g if t != eos])
            for u in until:
                text = text.split(u)[0]
            out.append(text)
        return out
