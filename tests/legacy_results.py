"""Result folders in the formats written before results had kinds (no ``circuits.json`` marker), to check that
they are still read: each builder writes one folder under ``root`` the way that version's job did
(``config.json`` beside ``summary.json``/``data.json``/``result.json``) with small random numbers."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from circuits.data.templates import OPERATIONS
from circuits.explain.attention import ROLE_NAMES, RoleAttention
from circuits.io import write_json
from circuits.validate.knockout import KnockoutCurve

N_LAYERS, N_HEADS = 6, 4


def _effects(seed: int) -> tuple[list[list[float]], list[float]]:
    g = torch.Generator().manual_seed(seed)
    heads = torch.randn(N_LAYERS, N_HEADS, generator=g) * 0.01
    heads[3, 1] = -0.30  # a planted key head, and one per seed
    heads[seed % N_LAYERS, (seed + 2) % N_HEADS] = -0.12
    return heads.tolist(), (torch.randn(N_LAYERS, generator=g) * 0.05).tolist()


def write_identify(root: Path, task: str = "addition", seed: int = 0) -> Path:
    folder = root / task
    heads, mlps = _effects(seed)
    flat = sorted(((heads[l][h], l, h) for l in range(N_LAYERS) for h in range(N_HEADS)))
    key = [[l, h, -e] for e, l, h in flat if e < -0.05]
    config = {"model": "tiny", "task": task, "mode": "path", "n_pairs": 8, "key_rule": "fraction>=0.05", "seed": seed,
              "few_shot": "auto", "prefix_policy": "keep", "dtype": "float32", "memory_mb": 64}
    summary = {
        "model": "tiny", "task": task, "mode": "path", "n_pairs": 8, "accuracy": 0.875, "mean_answer_prob": 0.6,
        "counterfactual_accuracy": 0.0, "counterfactual_answer_prob": 0.01,
        "baseline": {"answer_logit": 20.0, "counterfactual_answer_logit": 12.0, "full_effect_relative_logit": -0.4,
                     "answer_prob": 0.6, "counterfactual_answer_prob": 0.01, "logit_diff": 5.0},
        "metric": "relative_logit", "head_effects": heads, "mlp_effects": mlps,
        "metrics": {m: {"head_effects": heads if m != "fraction" else [[-x for x in row] for row in heads],
                        "mlp_effects": mlps} for m in ("relative_logit", "fraction", "logit_diff", "prob")},
        "key_rule": {"rule": "fraction>=0.05", "metric": "fraction", "op": ">=", "threshold": 0.05, "top_k": None},
        "key_heads": key, "key_mlps": [], "fraction_key_heads": len(key) / (N_LAYERS * N_HEADS),
        "seconds": 1.0, "config": config,
    }
    write_json(folder / "summary.json", summary)
    write_json(folder / "config.json", config)
    return folder


def write_identify_all(root: Path) -> Path:
    out = root / "identify"
    for i, op in enumerate((*OPERATIONS, "all")):
        write_identify(out, op, seed=i)
    return out


def _experiment(root: Path, name: str, config: dict, data: dict, files: dict[str, str] | None = None) -> Path:
    folder = root / name
    write_json(folder / "data.json", data)
    write_json(folder / "config.json", {"model": "tiny", **config, "out": str(folder)})
    for fname, text in (files or {}).items():
        (folder / fname).write_text(text, encoding="utf-8")
    return folder


def write_fig2(root: Path) -> Path:
    heads, mlps = _effects(7)
    return _experiment(root, "fig2_key_heads", {"task": "addition", "n_pairs": 8, "threshold": -0.05},
                       {"task": "addition", "n_pairs": 8, "head_effects": heads, "mlp_effects": mlps,
                        "top_heads": [[3, 1, -0.3, 0.4], [1, 1, -0.12, 0.2], [0, 0, -0.01, 0.0]],
                        "n_below_threshold": 2, "share_below_threshold": 2 / 24})


def write_fig15(root: Path) -> Path:
    ops = list(OPERATIONS)
    return _experiment(root, "fig15_per_operation", {"operations": ops, "n_pairs": 8, "top": 3},
                       {"operations": ops, "head_effects": {op: _effects(i)[0] for i, op in enumerate(ops)},
                        "key_heads": {op: [[3, 1], [i, 0], [5, 3]] for i, op in enumerate(ops)},
                        "overlap": [[3 if a == b else 2 for b in ops] for a in ops], "pairs": {}})


def write_knockout(root: Path) -> Path:
    ks = [0, 1, 2, 4]
    curve = KnockoutCurve(ks=ks, ranking=[(3, 1), (0, 2), (1, 3), (5, 0)], effect_accuracy=[0.9, 0.5, 0.3, 0.1],
                          effect_prob=[0.6, 0.3, 0.2, 0.05], random_orders=[[(0, 0)] * 4, [(1, 1)] * 4],
                          random_accuracy=[[0.9, 0.9, 0.85, 0.8], [0.9, 0.88, 0.9, 0.84]],
                          random_prob=[[0.6, 0.6, 0.55, 0.5], [0.6, 0.58, 0.6, 0.52]])
    return _experiment(root, "fig3_knockout", {"task": "addition", "ks": ks, "seeds": [0, 1]},
                       {"curve": curve.to_json(), "n_pairs": 8, "task": "addition"})


def write_transfer(root: Path) -> Path:
    names = ("svamp", "multi_digit", "decimal", "time_span", "mmlu_humanities")
    res = {k: {"n": 8, "accuracy_before": 0.5 + 0.05 * i, "accuracy_after": 0.2, "accuracy_random_heads": 0.45}
           for i, k in enumerate(names)}
    return _experiment(root, "fig4_transfer", {"task": "addition", "n_key_heads": 2},
                       {"results": res, "key_heads": [[3, 1], [0, 2]], "random_heads": [[1, 1], [2, 2]], "examples": {}})


def write_roles(root: Path) -> Path:
    g = torch.Generator().manual_seed(0)
    heads = [(3, 1), (0, 2)]
    by_op = {}
    for op in OPERATIONS:
        ra = RoleAttention(heads, ROLE_NAMES, torch.rand(5, len(heads), len(ROLE_NAMES), generator=g).softmax(-1))
        by_op[op] = {**ra.to_json(), "dominant": ra.dominant()}
    return _experiment(root, "fig5_attention_roles", {"task": "addition", "n_key_heads": 2},
                       {"heads": [list(h) for h in heads], "by_operation": by_op})


def attention_page(prompts: list[str], heads: list[tuple[int, int]]) -> str:
    """A page shaped like :func:`circuits.explain.attention.attention_html` writes, from random patterns."""
    import circuitsvis as cv

    g = torch.Generator().manual_seed(0)
    parts = ["<h1>Key heads</h1>"]
    for text in prompts:
        tokens = text.split()
        n = len(tokens)
        pat = torch.rand(len(heads), n, n, generator=g).masked_fill(torch.ones(n, n).triu(1).bool(), -1e9).softmax(-1)
        view = cv.attention.attention_heads(attention=pat, tokens=tokens, attention_head_names=[f"L{l}H{h}" for l, h in heads])
        parts += [f"<h3>{text}</h3>", view.local_src]
    return "<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>" + "\n".join(parts) + "</body></html>"


def write_views(root: Path) -> Path:
    prompts = ["12 + 7 = 19", "30 - 4 = 26"]
    heads = [(3, 1), (0, 2)]
    return _experiment(root, "fig7_attention_views", {"task": "addition", "n_key_heads": 2},
                       {"heads": [list(h) for h in heads], "prompts": prompts},
                       files={"figure.html": attention_page(prompts, heads)})


def write_lens(root: Path) -> Path:
    g = torch.Generator().manual_seed(1)
    means = {k: (torch.randn(N_LAYERS, generator=g) * 0.1).tolist() for k in ("in_A", "in_B", "delta_C", "delta_other")}
    top = [[(str(i + j), 0.1 * j - 0.2) for j in range(3)] for i in range(N_LAYERS)]
    return _experiment(root, "fig6_mlp_logit_lens", {"task": "addition", "example": "4 + 3 = "},
                       {"means": means, "n_pairs": 8, "example": "4 + 3 = ", "top_tokens": top, "writing_start": 4,
                        "peak_in_A": 2, "peak_in_B": 3})


def _tasks(acc: float) -> dict:
    return {"gsm8k": {"acc": acc, "n": 8}, "mmlu": {"acc": 0.3, "n": 24},
            "perplexity": {"word_perplexity": 40.0 - 10 * acc, "n": 24}}


def write_table1(root: Path) -> Path:
    rows = [{"name": "base", **{"tasks": _tasks(0.1)}, "arithmetic_by_form": {"digits": 0.5, "words": 0.2}}]
    for name, acc, params in (("full SFT", 0.2, 134.5e6), ("Precise SFT (top-8 heads)", 0.25, 1.2e6)):
        tasks = _tasks(acc)
        rows.append({"name": name, "train": {"samples_per_s": 3.0 if params < 1e8 else 1.0, "tuned_parameters": params,
                                             "steps": 4, "losses": [2.0, 1.5]},
                     "tasks": tasks, "arithmetic_by_form": {"digits": 0.6, "words": 0.3},
                     "delta": {t: (tasks[t].get("acc") or tasks[t]["word_perplexity"]) - (rows[0]["tasks"][t].get("acc") or
                               rows[0]["tasks"][t]["word_perplexity"]) for t in tasks}})
    return _experiment(root, "table1", {"top_k": 8, "lr": 1e-4, "epochs": 1},
                       {"heads": [[3, 1], [0, 2]], "heads_source": "identify", "rows": rows})


def write_finetune_run(root: Path) -> Path:
    folder = root / "finetune_run"
    write_json(folder / "config.json", {"model": "tiny", "heads": [[3, 1], [0, 2]], "lr": 2e-5, "epochs": 2})
    write_json(folder / "result.json", {"steps": 3, "samples": 96, "samples_per_s": 12.5, "train_seconds": 7.7,
                                        "tuned_parameters": 1_200_000, "total_parameters": 134_500_000,
                                        "losses": [2.1, 1.8, 1.6], "resumed_from": 0, "plan": {}})
    return folder


def write_evaluation(root: Path) -> Path:
    path = root / "eval_precise.json"
    path.write_text(json.dumps({"config": {"model": "tiny", "delta": "finetune_run/delta.pt", "limit": 8},
                                "tasks": _tasks(0.25)}))
    return path


# builder -> the kind its folder is read as now (the Figure 2 script's data.json is an identify result)
ALL_BUILDERS = {
    "identify": write_identify, "key_heads": write_fig2, "per_operation": write_fig15, "knockout": write_knockout,
    "transfer": write_transfer, "attention_roles": write_roles, "attention_views": write_views, "logit_lens": write_lens,
    "sft_table": write_table1, "finetune": write_finetune_run, "evaluation": write_evaluation,
}
KIND = {name: ("identify" if name == "key_heads" else name) for name in ALL_BUILDERS}


def write_everything(root: Path) -> Path:
    """Every kind of result under ``root`` (identify with the four operations and ``all``)."""
    write_identify_all(root)
    for kind, build in ALL_BUILDERS.items():
        if kind != "identify":
            build(root)
    return root
