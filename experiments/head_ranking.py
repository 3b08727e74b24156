"""A stand-in head ranking for the fine-tuning experiments when no ``circuits identify`` result is given.

Activation patching at END (Section 4.1, simplified): for each head, its ``hook_z`` at the last position
is replaced by its value on the counterfactual prompt (``{A} @ {B} = ``, the operator removed), every
later component recomputes, and the effect is the relative change of the answer logit, averaged over
pairs the model answers correctly. Path patching (``circuits identify``, on main) freezes the other
heads; pass its folder with ``--heads-from`` to use it instead. Written in the identify format
(``summary.json`` with ``key_heads``, ``head_effects``, ``mlp_effects``) so both read the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformer_lens import HookedTransformer
from transformer_lens.utilities import get_act_name

from circuits.finetune import write_json_atomic
from circuits.sft_data import EQUATION_PREFIX


def addition_pairs(model: HookedTransformer, n: int = 8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference/counterfactual token batches and answer tokens, for single-digit sums the model gets right."""
    ref, cf, ans = [], [], []
    for a in range(1, 10):
        for b in range(1, 10 - a):
            r = model.tokenizer(f"{EQUATION_PREFIX}{a} + {b} = ", add_special_tokens=False).input_ids
            c = model.tokenizer(f"{EQUATION_PREFIX}{a} @ {b} = ", add_special_tokens=False).input_ids
            t = model.tokenizer(str(a + b), add_special_tokens=False).input_ids[0]
            if len(r) == len(c):
                ref.append(r), cf.append(c), ans.append(t)
    ref_t, cf_t, ans_t = torch.tensor(ref), torch.tensor(cf), torch.tensor(ans)
    with torch.no_grad():
        correct = model(ref_t)[:, -1].argmax(-1) == ans_t
    idx = correct.nonzero()[:, 0][:: max(1, int(correct.sum()) // n)][:n]
    return ref_t[idx], cf_t[idx], ans_t[idx]


@torch.no_grad()
def rank_heads(model: HookedTransformer, n_pairs: int = 8) -> dict:
    ref, cf, ans = addition_pairs(model, n_pairs)
    rows = torch.arange(len(ans))
    _, ref_cache = model.run_with_cache(ref, names_filter=lambda n: n.endswith(("hook_resid_pre", "hook_z")))
    _, cf_cache = model.run_with_cache(cf, names_filter=lambda n: n.endswith("hook_z") or n.endswith("hook_mlp_out"))
    _, ref_mlp = model.run_with_cache(ref, names_filter=lambda n: n.endswith("hook_mlp_out"))
    base = model(ref)[rows, -1, ans]
    cfg = model.cfg

    def effect(layer: int, hook_name: str, replace) -> float:
        logits = model.run_with_hooks(
            ref_cache[get_act_name("resid_pre", layer)], start_at_layer=layer, fwd_hooks=[(hook_name, replace)]
        )
        return float(((logits[rows, -1, ans] - base) / base.abs()).mean())

    head_effects = []
    for layer in range(cfg.n_layers):
        z_cf = cf_cache[get_act_name("z", layer)]
        row = []
        for head in range(cfg.n_heads):
            def patch(z, hook, h=head, src=z_cf):
                z[:, -1, h] = src[:, -1, h]
                return z
            row.append(effect(layer, get_act_name("z", layer), patch))
        head_effects.append(row)
    mlp_effects = []
    for layer in range(cfg.n_layers):
        out_cf = cf_cache[get_act_name("mlp_out", layer)]

        def patch_mlp(x, hook, src=out_cf):
            x[:, -1] = src[:, -1]
            return x
        mlp_effects.append(effect(layer, get_act_name("mlp_out", layer), patch_mlp))
    ranked = sorted(((e, l, h) for l, r in enumerate(head_effects) for h, e in enumerate(r)))
    return {
        "method": "activation patching of hook_z at END, counterfactual '{A} @ {B} = ' (experiments/head_ranking.py)",
        "n_pairs": len(ans),
        "key_heads": [[l, h, e] for e, l, h in ranked],
        "head_effects": head_effects,
        "mlp_effects": mlp_effects,
    }


def ranking_folder(model: HookedTransformer, folder: str | Path) -> Path:
    """``folder`` holding ``summary.json``: computed once, then reused."""
    folder = Path(folder)
    if not (folder / "summary.json").is_file():
        write_json_atomic(rank_heads(model), folder / "summary.json")
    return folder


if __name__ == "__main__":
    from circuits.models import load_model

    torch.set_num_threads(1)
    out = ranking_folder(load_model("smollm2"), "results/head_ranking")
    summary = json.loads((out / "summary.json").read_text())
    print(summary["key_heads"][:10], "mlps:", sorted(range(len(summary["mlp_effects"])), key=lambda i: summary["mlp_effects"][i])[:3])
