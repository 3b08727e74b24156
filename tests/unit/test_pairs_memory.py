"""A pairs file of any length is scored in bounded memory (issue 41, DoS: a 100,000-line file asked for 19.7 GB because
``pair_logits`` held every pair's full-vocabulary logits). What is measured is what is allocated, not time: every
tensor an operation creates (views of an existing tensor excluded) is recorded while the file is read, and the largest
must not grow with the number of pairs; the scores equal the old all-pairs path's."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from circuits.data.pairs import make_pair, pair_answer_scores, pair_logits, read_pairs_file
from circuits.validate.knockout import knockout, knockout_logits, replacement_values, score


class LargestAllocation(TorchDispatchMode):
    """The largest number of elements any operation's new tensor holds (outputs that share an input's storage, views
    such as ``W_U``'s transpose, are not allocations)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, t.numel())
        return out


def _file(tmp_path, n: int):
    path = tmp_path / f"pairs{n}.jsonl"
    rows = [{"prompt": f"{a % 9 + 1} + {a % 7 + 1} = ", "counterfactual": f"{a % 9 + 1} @ {a % 7 + 1} = ",
             "answer": str(a % 9 + a % 7 + 2)} for a in range(n)]
    rows[1]["answers"] = ["123", "4"]  # an answer of several tokens: teacher-forced positions too
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _largest(fn) -> int:
    with torch.no_grad(), LargestAllocation() as mode:
        fn()
    return mode.largest


def test_reading_a_pairs_file_allocates_one_batch_of_logits_whatever_its_length(tiny_llama, tmp_path):
    V = tiny_llama.cfg.d_vocab
    short, long = _file(tmp_path, 70), _file(tmp_path, 280)
    peaks = [_largest(lambda p=p: read_pairs_file(tiny_llama, p, batch_size=64)) for p in (short, long)]
    # the old path held 70 and then 280 pairs' logits (and their softmax) at once: 70 x V, then 280 x V elements
    assert peaks[0] == peaks[1] <= 64 * V, (peaks, V)


def test_streamed_scores_equal_the_all_pairs_logits(tiny_llama, tmp_path):
    """The plain reference: every pair's logits at once, softmax, top token and answer probability."""
    pairs = [make_pair(tiny_llama.tokenizer, f"{a} + {b} = ", f"{a} @ {b} = ", str(a + b))
             for a in range(1, 6) for b in range(1, 4)]
    for which in ("reference", "counterfactual"):
        probs = pair_logits(tiny_llama, pairs, which).softmax(-1)
        top, prob = pair_answer_scores(tiny_llama, pairs, which, batch_size=4)
        assert torch.equal(top, probs.argmax(-1))
        ans = torch.tensor([p.answer_token_id for p in pairs])
        torch.testing.assert_close(prob, probs[torch.arange(len(pairs)), ans], rtol=1e-5, atol=1e-7)
    means = replacement_values(tiny_llama, pairs)
    heads = [(0, 1), (1, 2)]
    old = score(knockout_logits(tiny_llama, pairs, means, heads), [p.answer_token_id for p in pairs])
    new = knockout(tiny_llama, pairs, heads, means=means, batch_size=4)
    assert old.correct == new.correct
    torch.testing.assert_close(torch.tensor(new.probs), torch.tensor(old.probs), rtol=1e-5, atol=1e-7)


def test_a_pairs_file_scores_as_the_old_path(tiny_llama, tmp_path):
    """read_pairs_file's accuracy and answer probabilities (one-token and teacher-forced answers) equal those computed
    from every pair's full logits at once."""
    path = _file(tmp_path, 12)
    got = read_pairs_file(tiny_llama, path, batch_size=5)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    pairs = [make_pair(tiny_llama.tokenizer, r["prompt"], r["counterfactual"], r.get("answer", (r.get("answers") or [""])[0]))
             for r in rows]
    hit = torch.ones(len(pairs), dtype=torch.bool)
    prob = torch.ones(len(pairs))
    for i, p in enumerate(pairs):
        for k, tok in enumerate(p.answer_ids):
            forced = replace(p, reference_token_ids=p.reference_token_ids + p.answer_ids[:k])
            probs = pair_logits(tiny_llama, [forced]).softmax(-1)[0]
            hit[i] &= bool(probs.argmax() == tok)
            prob[i] *= probs[tok]
    assert got.accuracy == float(hit.float().mean())
    assert abs(got.mean_answer_prob - float(prob.mean())) < 1e-6
    assert any(len(p.answer_ids) > 1 for p in pairs)  # the teacher-forced path was exercised


def test_identifys_sweep_allocates_per_pair_block_not_per_pair(tiny_llama, monkeypatch):
    """What a pairs file feeds next, identify's END sweep, works in blocks of ``PAIR_BLOCK`` pairs, so its largest
    tensor does not grow with the number of pairs either (measured on the tiny model at the real block of 256: 256 x V
    for 256 pairs and for 600). Here with blocks of 8, to be quick: the same largest allocation for 16 and 40 pairs."""
    from circuits.patching.engines import end_sweep

    monkeypatch.setattr(end_sweep, "PAIR_BLOCK", 8)
    peaks = []
    for n in (16, 40):
        pairs = [make_pair(tiny_llama.tokenizer, f"{a % 9 + 1} + {a % 7 + 1} = ", f"{a % 9 + 1} @ {a % 7 + 1} = ",
                           str(a % 9 + a % 7 + 2)) for a in range(n)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a random model ranks no answer high: said, and beside the point here
            peaks.append(_largest(lambda pairs=pairs: end_sweep.sweep(tiny_llama, pairs, "path", progress=False)))
    assert peaks[0] == peaks[1], peaks
