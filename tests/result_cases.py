"""One real result of every kind in :data:`circuits.results.RESULT_TYPES`, built on a tiny model (the steps that run
a model) or by hand from small values (tables, fine-tuning runs, evaluations), each with its typed config.

:func:`build_results` makes them all from one identify run (a few seconds on a tiny model); the round-trip test
(tests/unit/test_results_io.py) saves and loads each, and the report tests (tests/unit/test_report.py) draw them.
:func:`write_identify` saves an identify result without a model (mean effects only, as a result without per-pair
values is saved), for tests that need one result folder and no model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from circuits.beyond.edges.config import EdgesConfig
from circuits.beyond.faithfulness.config import FaithfulnessConfig
from circuits.beyond.faithfulness.job import faithfulness
from circuits.beyond.edges.result import EdgeResult, receiver_effects_of
from circuits.beyond.heuristics.config import HeuristicsConfig
from circuits.beyond.heuristics.job import run as run_heuristics
from circuits.beyond.neurons.config import NeuronConfig
from circuits.beyond.neurons.job import run as run_neurons
from circuits.beyond.carry.config import CarryConfig
from circuits.beyond.carry.job import run as run_carry
from circuits.beyond.positions.config import PositionConfig
from circuits.beyond.positions.job import run as run_positions
from circuits.beyond.screen.config import ScreenConfig
from circuits.beyond.screen.job import screen
from circuits.beyond.stability.config import StabilityConfig
from circuits.beyond.stability.job import stability
from circuits.evaluation.result import EvalResult
from circuits.evaluation.tasks import EvalConfig
from circuits.explain.attention import (AttentionViews, RolesConfig, ViewsConfig, attention_html, attention_roles,
                                        role_attention)
from circuits.explain.logit_lens import LensConfig, logit_lens, mlp_lens, writing_start
from circuits.explain.numbers.config import NumbersConfig
from circuits.explain.numbers.job import numbers
from circuits.data.templates import OPERATIONS
from circuits.identify import IdentifyConfig, IdentifyResult, PerOperation, identify
from circuits.identify.result import PerOperationConfig
from circuits.results import Result
from circuits.sft.compare import SFTComparison, TableConfig
from circuits.sft.result import FinetuneResult
from circuits.evaluation.study_config import STUDY_TRAIN, StudyConfig
from circuits.evaluation.study_result import SFTStudyResult
from circuits.sft.train import FinetuneConfig
from circuits.types import Head
from circuits.validate.ablation_kinds import AblationComparison, AblationKindsConfig, compare_ablations
from circuits.validate.cross_model import CrossModelConfig, CrossModelResult
from circuits.validate.knockout import KnockoutConfig, KnockoutResult, knockout_curve
from circuits.validate.transfer import (TransferConfig, TransferResult, WordProblemConfig, WordProblemHeads,
                                        with_intervals)

IDENTIFY = IdentifyConfig(model="tiny", task="addition", n_pairs=4, few_shot="on", filter_correct=False,
                          key_rule="top3", receivers="2.1,MLP1", bootstrap=20)
SOURCE = {"model": "tiny", "task": "addition", "n_pairs": 4, "seed": 0}


def _tasks(acc: float) -> dict[str, dict[str, Any]]:
    return {"gsm8k": {"acc": acc, "n": 8}, "mmlu": {"acc": 0.3, "n": 24},
            "perplexity": {"word_perplexity": 40.0 - 10 * acc, "n": 24}}


def _sft_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"name": "base", "tasks": _tasks(0.1), "arithmetic_by_form": {"digits": 0.5, "words": 0.25}}]
    for name, acc, params in (("full SFT", 0.2, 134_515_008), ("Precise SFT (top-8 heads)", 0.25, 1_200_000)):
        tasks = _tasks(acc)
        rows.append({"name": name, "train": {"samples_per_s": 3.0, "tuned_parameters": params, "steps": 4,
                                             "losses": [2.0, 1.5]},
                     "tasks": tasks, "arithmetic_by_form": {"digits": 0.625, "words": 0.375},
                     "delta": {"gsm8k": acc - 0.1, "mmlu": 0.0, "perplexity": -10 * (acc - 0.1)}})
    return rows


def _sft_study() -> SFTStudyResult:
    """A Precise SFT study of two arms, two seeds, four items (by hand)."""
    config = StudyConfig(train=STUDY_TRAIN.replace(model="tiny"), key_heads=(Head(1, 2), Head(0, 1)),
                         arms=("precise", "full"), seeds=(0, 1), lrs=(1e-3, 1e-2), n_boot=50)
    variants = [{"name": "Precise SFT (key heads)", "arm": "precise", "heads": [[1, 2], [0, 1]], "mlps": [], "draw": None,
                 "lora_rank": None, "lr": 1e-2, "tuned_parameters": 4096, "sweep_seconds": 1.5},
                {"name": "full SFT", "arm": "full", "heads": [], "mlps": [], "draw": None, "lora_rank": None, "lr": 1e-3,
                 "tuned_parameters": 6_400_000, "sweep_seconds": 2.5}]
    runs = [{"variant": v["name"], "seed": s, "lr": v["lr"], "correct": [1.0, float(s), 0.0, 1.0],
             "logp": [-0.5, -1.25, -3.0, -0.25], "tuned_parameters": v["tuned_parameters"], "train_seconds": 0.75,
             "steps": 3, "samples": 24, "losses": [2.5, 2.0, 1.75]} for v in variants for s in (0, 1)]
    sweep = [{"variant": v["name"], "lr": lr, "seed": 0, "val_logp": -1.5, "val_acc": 0.5, "final_loss": 1.75}
             for v in variants for lr in (1e-3, 1e-2)]
    return SFTStudyResult(config, variants, runs, sweep, ["arithmetic:single", "arithmetic:word", "two_digit", "mmlu"],
                          {"correct": [0.0, 1.0, 0.0, 1.0], "logp": [-1.0, -0.5, -4.0, -0.75]},
                          {"total": 12.5, "train": 6.0, "eval": 4.0, "other": 2.5, "sweep": 8.0}, 12)


_BUILT: dict[int, tuple[Any, dict[str, Result]]] = {}  # id(model) -> (the model, kept alive; its results)


def build_results(model: Any, tmp: Path) -> dict[str, Result]:
    """One result of every kind, keyed by kind (``tmp``: where the position and neuron jobs save theirs).

    Built once per process and model (five test files ask for them, each once; one build was test_read_checks.py's
    17 s set-up on CI; issue 44); every call gets its own deep copy, so a test that changes one changes nobody else's. The jobs' folders stay
    under the first caller's ``tmp`` (the session's temporary root)."""
    import copy

    if id(model) not in _BUILT:
        _BUILT[id(model)] = (model, _build_results(model, Path(tmp)))
    memo = {id(model): model, id(getattr(model, "tokenizer", None)): getattr(model, "tokenizer", None)}
    return copy.deepcopy(_BUILT[id(model)][1], memo)


def _build_results(model: Any, tmp: Path) -> dict[str, Result]:
    r = identify(model, config=IDENTIFY, progress=False)
    pairs = r.pairs
    heads = r.scores().top(None, "heads")
    out: dict[str, Result] = {"identify": r}
    out["per_operation"] = PerOperation.from_identify(PerOperationConfig(**SOURCE, operations=("addition", "subtraction"),
                                                                         top=3), {"addition": r, "subtraction": r}, 3)
    curve = knockout_curve(model, pairs, heads[:3], [0, 1, 3], (0, 1))
    out["knockout"] = KnockoutResult(KnockoutConfig(**SOURCE, ks=(0, 1, 3), seeds=(0, 1)), curve, "addition", len(pairs))
    out["transfer"] = TransferResult(
        TransferConfig(**SOURCE, n_key_heads=2),
        {"svamp": {"n": 3, "accuracy_before": 0.5, "accuracy_after": 0.25, "accuracy_random_heads": 0.5},
         "decimal": with_intervals({"n": 4, "accuracy_before": 0.75, "accuracy_after": 0.5,
                                    "accuracy_random_heads": 0.75})},  # svamp: saved before the intervals
        heads[:2], [Head(0, 0), Head(1, 3)], {"svamp": "Q: 3 apples and 4 more? A:"})
    lens = mlp_lens(model, pairs).means()
    measured = {"title": "tiny", "architecture": model.cfg.original_architecture, "n_layers": model.cfg.n_layers,
                "n_heads": model.cfg.n_heads, "n_params": 1000,
                "operations": {"addition": {"accuracy": r.pair_stats.get("accuracy"), "n_pairs": len(pairs),
                                            "key_heads": [list(h) for h, _ in r.key_heads()], "share_key_heads": 0.25,
                                            "full_effect": -0.5}},
                "shared_heads": [], "knockout": curve.to_json() | {"n_pairs": len(pairs)},
                "transfer_heads": [list(h) for h in heads[:2]],
                "transfer": {"svamp": {"n": 3, "accuracy_before": 0.5, "accuracy_after": 0.25, "accuracy_random_heads": 0.5}},
                "roles": role_attention(model, pairs, heads[:2]).to_json(),
                "logit_lens": {**{k: lens[k] for k in ("delta_C", "delta_other", "in_A", "in_B")},
                               "writing_start": writing_start(lens["delta_C"], lens["delta_other"])}}
    out["cross_model"] = CrossModelResult(CrossModelConfig(models=("tiny",), operations=("addition",), identify=IdentifyConfig(n_pairs=4), ks=(0, 1, 3),
                                                           seeds=(0, 1)), {"tiny": measured})
    out["word_problems"] = WordProblemHeads(
        WordProblemConfig(**SOURCE, dataset="addsub", n=8, top=3), heads[:3],
        {"addsub": {"n_questions": 8, "skipped": {}, "accuracy": 0.5, "n_correct": 4,
                    "key_heads": [[1, 2, -0.25], [0, 1, -0.125]], "shared_with_templates": [[1, 2]],
                    "accuracy_knockout_own": 0.25, "accuracy_knockout_template_heads": 0.375,
                    "accuracy_knockout_shared": 0.5, "accuracy_knockout_own_only": 0.5}})
    out["attention"] = attention_roles(model, pairs, heads[:2], config=RolesConfig(**SOURCE, n_key_heads=2,
                                                                                         operations=("addition",)))
    prompts = [p.reference for p in pairs[:2]]
    out["attention-views"] = AttentionViews(ViewsConfig(**SOURCE, n_key_heads=2, operations=("addition",)), heads[:2],
                                            prompts, attention_html(model, prompts, heads[:2], last_tokens=8))
    out["lens"] = logit_lens(model, pairs, k=3, config=LensConfig(**SOURCE, top_k=3))
    out["finetune"] = FinetuneResult(FinetuneConfig(model="tiny", heads=(Head(1, 2), Head(0, 1)), mlps=(1,), lr=1e-3,
                                                    epochs=1, batch_size=4, micro_batch_size=2, sources=("arithmetic",)),
                                     steps=3, samples=12, samples_per_s=12.5, train_seconds=0.96, tuned_parameters=4096,
                                     total_parameters=6_400_000, losses=[2.5, 2.25, 2.0], plan={"heads": [[1, 2], [0, 1]]})
    out["sft_table"] = SFTComparison(TableConfig(model="tiny", top_k=2, lr=1e-3, eval_tasks=("gsm8k", "mmlu", "perplexity")),
                                     _sft_rows(), heads[:2], "results/identify/addition", {"head_counts": [2, 4]},
                                     notes="The paper: 7.2 -> 9.8 on GSM8K.")
    out["sft-study"] = _sft_study()
    out["evaluate"] = EvalResult(EvalConfig(model="tiny", tasks=("gsm8k", "mmlu", "perplexity"), limit=8), _tasks(0.25),
                                   {"digits": 0.5, "words": 0.25})
    out["screen"] = screen(model, pairs, ScreenConfig(**SOURCE, few_shot="on", filter_correct=False, verify=2),
                           progress=False)
    pc = PositionConfig(**SOURCE, few_shot="on", filter_correct=False, offsets=(0, 1, 2))
    out["positions"] = run_positions(pc.replace(n_pairs=2), tmp / "positions", model=model, progress=False)
    nc = NeuronConfig(**SOURCE, few_shot="on", filter_correct=False, layers=(1,), shares=(0.05,))
    out["neurons"] = run_neurons(nc.replace(n_pairs=3), tmp / "neurons", model=model, progress=False)
    hc = HeuristicsConfig(**SOURCE, few_shot="on", filter_correct=False, layers=(1,), neurons_per_mlp=4, operands=(0, 4),
                          threshold=0.3, alpha=1.0, n_random=2, n_boot=20, knockout_classes=2)
    out["heuristics"] = run_heuristics(hc.replace(n_pairs=2), tmp / "heuristics", model=model, progress=False)
    out["carry"] = run_carry(CarryConfig(model=SOURCE["model"], filter_correct=False, n_boot=5, n_splits=5, n_random=2),
                             tmp / "carry", model=model, progress=False)
    receivers = r.edges.receivers
    out["edges"] = EdgeResult(EdgesConfig(**SOURCE, receivers="2.1,MLP1"), pairs, r.edges,
                              receiver_effects_of(r, receivers, "fraction"), "fraction")
    out["stability"] = stability({"addition": {0: r, 1: r}}, StabilityConfig(IdentifyConfig(model="tiny", n_pairs=4), operations=("addition",),
                                                                             seeds=(0, 1)))
    curves = compare_ablations(model, pairs, heads[:3], [0, 1, 3], (0,), ("mean", "zero"))
    out["ablation_kinds"] = AblationComparison(AblationKindsConfig(**SOURCE, operations=("addition",), ks=(0, 1, 3),
                                                                   seeds=(0,), kinds=("mean", "zero")),
                                               {"addition": curves}, {"addition": len(pairs)})
    out["numbers"] = numbers(model, r, NumbersConfig(**SOURCE, n_heads=2, n_mlps=2, n_problems=4, digit_floor=0.0,
                                                     digit_mlps=1, top_neurons=2), progress=False)
    fc = FaithfulnessConfig(**SOURCE, few_shot="on", filter_correct=False, rankings=("exact-path", "screen"),
                            sizes=(0.05, 0.2, 0.5), n_boot=20)
    out["faithfulness"] = faithfulness(model, pairs, fc, progress=False)
    return out


# kind -> how its files are named, for tests that break one file (the result's main tensor or JSON file)
MAIN_FILE: dict[str, str] = {"identify": "sweep.pt", "screen": "screen.pt", "positions": "positions.pt",
                             "neurons": "neurons.pt", "heuristics": "heuristics.pt", "edges": "edges.pt", "finetune": "result.json",
                             "evaluate": "result.json", "faithfulness": "faithfulness.pt",
                             "numbers": "numbers.pt", "carry": "carry.pt"}


def main_file(kind: str) -> str:
    return MAIN_FILE.get(kind, "data.json")



N_LAYERS, N_HEADS = 6, 4


def identify_from_effects(task: str = "addition", seed: int = 0) -> IdentifyResult:
    """An identify result of a 6-layer, 4-head model from planted mean effects (no pairs, no per-pair values)."""
    g = torch.Generator().manual_seed(seed)
    heads = torch.randn(N_LAYERS, N_HEADS, generator=g) * 0.01
    heads[3, 1] = 0.30  # a planted key head, and one per seed
    heads[seed % N_LAYERS, (seed + 2) % N_HEADS] = 0.12
    mlps = torch.randn(N_LAYERS, generator=g) * 0.05
    effects = {"fraction": (heads, mlps), "relative_logit": (-heads, mlps), "logit_diff": (-heads * 10, mlps * 10),
               "prob": (-heads / 2, mlps / 2)}
    config = IdentifyConfig(model="tiny", task=task, n_pairs=8, seed=seed, key_rule="fraction>=0.05", bootstrap=0)
    return IdentifyResult(config, [], None, {"n_candidates": 10, "accuracy": 0.875, "mean_answer_prob": 0.6}, 1.0,
                          None, effects)


def write_identify(root: Path, task: str = "addition", seed: int = 0) -> Path:
    return identify_from_effects(task, seed).save(root / task)


def write_identify_all(root: Path) -> Path:
    out = root / "identify"
    for i, op in enumerate((*OPERATIONS, "all")):
        write_identify(out, op, seed=i)
    return out


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
