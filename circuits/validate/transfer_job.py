"""The transfer job (Figure 4 and the MMLU check, ``circuits transfer``): knock out the key heads found on the
templates and measure next-token accuracy on SVAMP, multi-digit sums, decimals and time spans, and MMLU (humanities)
letter accuracy, before and after; as many random heads as a control.

:func:`transfer_result` computes the result from an identify result (``experiments/fig4_transfer.py`` calls it);
:func:`run` is the job's entry point (``--heads-from``, or identify made first). The mechanism is
:func:`circuits.validate.transfer.transfer_knockout` and the knockout's mean values."""

from __future__ import annotations

from pathlib import Path

from circuits.data.benchmarks import load_svamp_all, sample_mmlu
from circuits.identify.result import IdentifyResult
from circuits.identify.source import model_for, resolved, source_result
from circuits.models.backend import Model
from circuits.validate.config import TransferSets
from circuits.validate.knockout import compute_means, random_order
from circuits.validate.transfer import (TransferResult, mmlu_accuracy, mmlu_items, synthetic_set, transfer_knockout,
                                        word_problem_set)


def transfer_result(model: Model, made: IdentifyResult, config: TransferSets) -> TransferResult:
    """Figure 4: the top ``config.n_key_heads`` heads of ``made`` and as many random heads knocked out (mean
    ablation, means pooled over ``made``'s pairs) on each transfer set and on MMLU."""
    heads = made.top_heads(config.n_key_heads)
    control = random_order(model.cfg.n_layers, model.cfg.n_heads, config.random_seed)[: config.n_key_heads]
    means = compute_means(model, made.pairs, pooled=True)
    tok = model.tokenizer
    sets = {"svamp": word_problem_set(tok, load_svamp_all(config.data_dir), config.n, shots=config.svamp_shots,
                                      seed=config.seed)}
    for task in ("multi_digit", "decimal", "time_span"):
        sets[task] = synthetic_set(tok, task, config.n, seed=config.seed)
    res = transfer_knockout(model, sets, means, heads)
    ctrl = transfer_knockout(model, sets, means, control)
    for k in res:
        res[k]["accuracy_random_heads"] = ctrl[k]["accuracy_after"]
    mm = mmlu_items(tok, sample_mmlu(n=config.n_mmlu, seed=config.seed, data_dir=config.data_dir))
    res["mmlu_humanities"] = {"n": len(mm), "accuracy_before": mmlu_accuracy(model, mm, means),
                              "accuracy_after": mmlu_accuracy(model, mm, means, heads),
                              "accuracy_random_heads": mmlu_accuracy(model, mm, means, control)}
    return TransferResult(config, res, heads, control, {k: v[0].reference[-120:] for k, v in sets.items() if v})


def run(config: TransferSets, out: str | Path, *, model: Model | None = None,
        progress: bool = True) -> TransferResult:
    """The ``circuits transfer`` job: Figure 4 saved in ``out`` (``data.json``, ``figure.html``)."""
    from circuits.identify.source import save

    config = resolved(config)
    model = model_for(config, model)
    result = transfer_result(model, source_result(config, model, progress=progress), config)
    save(result, out)
    return result
