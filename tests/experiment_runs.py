"""Every experiment script's ``main`` run on a tiny model at a tiny size, into one results folder: what the
scripts really write, for the experiment, report and browser tests."""

from __future__ import annotations

import fcntl
import functools
import importlib
import os
import shutil
import tempfile
from pathlib import Path

SCRIPTS = ("fig2_key_heads", "fig3_knockout", "fig4_transfer", "fig5_attention_roles", "fig6_mlp_logit_lens",
           "fig7_attention_views", "fig15_per_operation", "table3_exponentiation", "table4_gsm8k",
           "table1_precise_sft", "table2_components", "cross_model", "screen_audit", "fig_information_flow",
           "fig_neurons", "fig_circuit", "fig3_ablation_kinds", "stability", "faithfulness",
           "fig_fourier")


def script(name: str):
    return importlib.import_module(name)


def tiny_config(name: str, root: Path):
    """The script's own Config at a tiny size, writing under ``root``."""
    from helpers import tiny_dir

    common = dict(model=str(tiny_dir("llama")), n_pairs=4, filter_correct=False, identify_dir=str(root / "identify"),
                  out=str(root / name))
    sizes = {
        "fig2_key_heads": dict(out=str(root / "identify" / "all")),
        "fig3_knockout": dict(ks=(0, 1, 2), seeds=(0, 1)),
        "fig4_transfer": dict(n_key_heads=2, n=3, n_mmlu=3, svamp_shots=1),
        "fig5_attention_roles": dict(n_key_heads=2, n_prompts=2),
        "fig6_mlp_logit_lens": dict(top_k=3),
        "fig7_attention_views": dict(n_key_heads=2, prompts_per_operation=1),
        "fig15_per_operation": dict(top=3),
        "table3_exponentiation": dict(n_key_heads=2, random_seeds=(0,)),
        "table4_gsm8k": dict(dataset="addsub", fallback="", n=4, top=3),
        "screen_audit": dict(verify=3),
        "fig_information_flow": dict(max_pairs=2),
        "fig_neurons": dict(top_mlps=1, shares=(0.05,)),
        "fig_circuit": dict(receivers="top2"),
        "fig3_ablation_kinds": dict(operations=("addition",), ks=(0, 1), seeds=(0,)),
        "stability": dict(operations=("addition",), seeds=(0, 1)),
        "fig_fourier": dict(n_heads=2, n_mlps=2, n_problems=4, digit_floor=0.0, digit_mlps=1, top_neurons=2),
    }
    if name == "cross_model":
        # Its identify results go beside the root, so the root holds one identify result per task as before.
        from circuits.identify.config import IdentifyConfig

        return script(name).Config(models=(common["model"], str(tiny_dir("gemma3"))), operations=("addition", "subtraction"),
                                   identify=IdentifyConfig(n_pairs=4, filter_correct=False), ks=(0, 1, 2), seeds=(0, 1), n_transfer=2,
                                   n_role_heads=2, n_role_prompts=2, out=common["out"],
                                   identify_dir=f"{root}-cross-identify/identify")
    if name == "faithfulness":
        from circuits.beyond.faithfulness.config import FaithfulnessConfig

        run = FaithfulnessConfig(n_pairs=2, filter_correct=False, few_shot="on", rankings=("exact-path", "eap-ig"),
                                 sizes=(0.1, 0.5), n_boot=10)
        return script(name).Config(faithfulness=run, models=(common["model"],), operations=("addition",),
                                   out=common["out"])
    if name.startswith("table1") or name.startswith("table2"):
        fields = dict(model=common["model"], heads_from=str(root / "identify" / "addition"), top_k=2,
                      sources=("arithmetic",), n_arithmetic=8, limit_per_source=8, batch_size=4, micro_batch_size=4,
                      max_length=48, eval_tasks=("arithmetic", "mmlu"), eval_limit=2, choice_limit=2, arithmetic_per_form=1,
                      mmlu_shots=1, eval_batch_size=4, threads=0, out=common["out"])
        if name.startswith("table2"):
            fields["mlp_counts"] = (1,)
        return script(name).Config(**fields)
    if name == "fig_heuristics":
        return script(name).Config(model=common["model"], n_pairs=4, filter_correct=False, layers=(1,),
                                   neurons_per_mlp=4, operands=(0, 4), knockout_classes=1, n_random=1, n_boot=10,
                                   out=common["out"])
    return script(name).Config(**{**common, **sizes[name]})


@functools.lru_cache(maxsize=1)
def run_all() -> Path:
    """Run every script once per test run; returns the results folder (read-only: a test that writes into it
    works on :func:`private_copy`). Under pytest-xdist the workers share one run: the first to ask runs the
    scripts under a file lock, the others wait for it and read its folder."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run_id:
        return _run_scripts(Path(tempfile.mkdtemp(prefix="circuits-experiments-")))
    root = Path(tempfile.gettempdir()) / f"circuits-experiments-{run_id}"
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".complete").exists():
            for half_done in (root, Path(f"{root}-cross-identify")):  # a worker of this run that died midway
                shutil.rmtree(half_done, ignore_errors=True)
            root.mkdir()
            _run_scripts(root)
            (root / ".complete").touch()
    return root


def _run_scripts(root: Path) -> Path:
    from helpers import tiny_model

    model = tiny_model("llama")
    for name in SCRIPTS:
        script(name).main(tiny_config(name, root), model=model)
    return root


def private_copy(root: Path, into: Path) -> Path:
    """A copy of :func:`run_all`'s folder (and the cross-model script's identify folder beside it) to write into."""
    copy = into / "results"
    shutil.copytree(root, copy)
    if Path(f"{root}-cross-identify").is_dir():
        shutil.copytree(f"{root}-cross-identify", f"{copy}-cross-identify")
    return copy
