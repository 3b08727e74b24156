"""What adding an engine takes, counted on a toy one: a module of its own (written here to a temporary folder, on
``sys.path``) that defines its scoring function and its plain reference and calls
:func:`circuits.patching.engines.registry.register`. Nothing in ``circuits/`` changes; the registry's own tests, the command
line's names and the faithfulness job's ranking path take it from there."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import check_engine_against_reference, mixed_pairs, tiny_dir

ROOT = Path(__file__).resolve().parents[2]

TOY = '''
"""A toy engine: each head and MLP scored by how far its END output moves between the two prompts (mean over
pairs of the L2 norm of the difference). Not a patching effect: a stand-in that any new engine replaces."""

import torch

from circuits.data.pairs import as_batch
from circuits.patching.core.metrics import get_metric
from circuits.patching.engines.registry import Engine, register
from circuits.patching.core.scores import Scores


def _moves(model, batch):
    rows = torch.arange(len(batch))
    names = lambda n: n.endswith(("hook_z", "hook_mlp_out"))
    _, ref = model.run_with_cache(batch.reference, names_filter=names)
    _, cf = model.run_with_cache(batch.counterfactual, names_filter=names)
    L = model.cfg.n_layers
    heads = torch.stack([(cf[f"blocks.{l}.attn.hook_z"] - ref[f"blocks.{l}.attn.hook_z"])[rows, batch.end].norm(dim=-1)
                         for l in range(L)])  # [layer, pair, head]
    mlps = torch.stack([(cf[f"blocks.{l}.hook_mlp_out"] - ref[f"blocks.{l}.hook_mlp_out"])[rows, batch.end].norm(dim=-1)
                        for l in range(L)])  # [layer, pair]
    return heads.mean(1).float().cpu(), mlps.mean(1).float().cpu()


def run(model, pairs, *, metric, positions, progress, memory_mb, **options):
    """toy: one batch of two cached runs"""
    heads, mlps = _moves(model, as_batch(pairs, model))
    return Scores({"heads": heads, "mlps": mlps}, get_metric(metric).name, 1, engine="toy")


def reference(model, batch, *, metric, positions, **options):
    """toy_engine.reference: the same, one pair at a time"""
    per = [_moves(model, batch.select([i])) for i in range(len(batch))]
    heads = torch.stack([h for h, _ in per]).mean(0)
    mlps = torch.stack([m for _, m in per]).mean(0)
    return Scores({"heads": heads, "mlps": mlps}, get_metric(metric).name, 1, engine="toy")


register(Engine("toy", run, reference, ("end",), frozenset({"end", "gqa"}), "#000000",
                "the toy engine of tests/unit/test_architecture.py"))
'''


@pytest.fixture
def toy_engine(tmp_path, monkeypatch):
    """The toy engine's module, imported from a temporary folder; the registry as it was afterwards."""
    import circuits.beyond.faithfulness.config  # noqa: F401  its default rankings are the registry's at import: not the toy's
    from circuits.patching.engines import registry

    (tmp_path / "toy_engine.py").write_text(textwrap.dedent(TOY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "ENGINES", dict(registry.ENGINES))
    importlib.import_module("toy_engine")
    yield tmp_path
    sys.modules.pop("toy_engine", None)


def _circuits_changes() -> list[str]:
    out = subprocess.run(["git", "status", "--porcelain", "--", "circuits"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.splitlines() if out.returncode == 0 else []


def test_a_new_engine_is_one_module(toy_engine, tiny_llama, tokenizer):
    from circuits.patching.engines.registry import ENGINES, node_engines

    before = _circuits_changes()
    files = sorted(p.name for p in toy_engine.iterdir() if p.suffix == ".py")
    assert files == ["toy_engine.py"]  # one module, no edit in circuits/
    assert "toy" in ENGINES and "toy" in node_engines()
    assert ENGINES["toy"].reference_name.startswith("toy_engine.reference")
    check_engine_against_reference(tiny_llama, tokenizer, "toy")  # what the registry's tests do with every entry
    assert _circuits_changes() == before


def test_the_faithfulness_job_ranks_with_a_new_engine(toy_engine, tiny_llama, tokenizer):
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.beyond.faithfulness.job import faithfulness
    from circuits.patching.engines.registry import ENGINES

    pairs = mixed_pairs(tokenizer, 3)
    config = FaithfulnessConfig(model=str(tiny_dir("llama")), rankings=("exact-path", "toy"), sizes=(0.2, 0.5),
                                positions=("end",), n_boot=5, edges=False)
    r = faithfulness(tiny_llama, pairs, config, progress=False)
    assert list(r.curves) == ["exact-path", "toy"] and list(r.curves["toy"]) == ["nodes@end"]
    toy = ENGINES["toy"].run(tiny_llama, pairs, metric=config.metric)
    assert torch.equal(r.scores["toy"]["heads"], toy.heads.abs()) and torch.equal(r.scores["toy"]["mlps"], toy.mlps)
    assert r.curves["toy"]["nodes@end"].f.isfinite().all()


def test_every_test_the_architecture_page_names_exists():
    """docs/architecture.md names, for each contract and recipe, the test that checks it: each must exist (a page
    whose checks were renamed or deleted is a page of claims no test holds)."""
    import ast
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"(tests/[\w/]+\.py)::(test_\w+)", page))
    assert len(named) >= 20, named
    missing = []
    for path, name in sorted(named):
        tree = ast.parse((root / path).read_text())
        if name not in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}:
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/architecture.md names tests that do not exist: {missing}"


def test_no_folder_of_the_package_holds_more_than_14_modules():
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "circuits"
    crowded = {str(d.relative_to(package.parent)): n for d in [package, *package.rglob("*")]
               if d.is_dir() and (n := len(list(d.glob("*.py")))) > 14}
    assert not crowded, f"folders over 14 modules (docs/architecture.md): {crowded}"


# The score-access methods every class in circuits/ defines (name pattern below; properties left out), as
# docs/architecture.md lists them: Scores's readers, each result's one scores(metric), the identify result's two
# documented conveniences, and five methods that share a name but read no engine's scores.
SCORE_ACCESS = r"^(effects?|per_pair|ranked|rank|top|top_\w+|key|key_(?!rule$)\w+|importance|by_layer|layer_effects|scores)$"
READERS = {"ranked", "top", "key", "importance", "by_layer"}  # the ranking readers: Scores's alone
SCORE_METHODS = {
    "Scores": {"importance", "ranked", "top", "key", "by_layer"},
    # each result keeps its data and hands its scores over as Scores, by a metric
    **{c: {"scores"} for c in ("SweepResult", "PositionSweep", "NeuronSweep", "EdgeSweep", "EAPIGScores",
                               "DirectLogitAttribution")},
    "Attribution": {"scores", "effect"},  # effect: the metric over its estimates (the QK nodes too, not in Scores)
    "IdentifyResult": {"scores", "key_heads", "top_heads"},  # Scores.key / Scores.top(first=rule), with its intervals
    "Metric": {"effect"},  # the metric itself: readouts -> effect
    "KnockoutCurve": {"per_pair"},  # accuracy after knockout per pair: no engine's scores
    "SFTStudyResult": {"scores"},  # benchmark scores of fine-tuned variants
    "CrossModelResult": {"key_head_depth"},  # where the key heads sit, as a share of depth
}


def _score_methods() -> dict[str, set[str]]:
    import ast
    import re

    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "circuits").rglob("*.py")):
        for cls in [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]:
            for f in cls.body:
                if (isinstance(f, ast.FunctionDef) and re.match(SCORE_ACCESS, f.name)
                        and not any(isinstance(d, ast.Name) and d.id == "property" for d in f.decorator_list)):
                    found.setdefault(cls.name, set()).add(f.name)
    return found


def test_scores_is_the_one_place_scores_are_read():
    """Only Scores defines the ranking readers (ranked, top, key, importance, by_layer); every engine result defines
    one scores(metric) and no forwarding reader (effects, ranked, key_mlps, top_senders, ...); the identify result keeps
    key_heads and top_heads, which call Scores. 36 score-access methods at a6c9793, 20 now."""
    found = _score_methods()
    assert found == SCORE_METHODS, {k: v for k, v in found.items() if SCORE_METHODS.get(k) != v}
    assert [c for c, names in found.items() if names & READERS and c != "Scores"] == []
    assert sum(map(len, found.values())) == 20


def test_the_identify_conveniences_are_scores_readings(tiny_llama, tokenizer):
    """IdentifyResult.key_heads and top_heads return what Scores.key and Scores.top(first=rule) return."""
    from circuits.identify.config import IdentifyConfig
    from circuits.identify.job import identify

    config = IdentifyConfig(model="tiny", task="addition", n_pairs=4, key_rule="top3:relative_logit", bootstrap=0,
                            filter_correct=False)
    r = identify(tiny_llama, mixed_pairs(tokenizer, 4), config, progress=False, warn=False, refuse=False)
    s = r.scores("relative_logit")
    assert r.key_heads() == s.key(r.key_rule) and len(s.key(r.key_rule)) == 3
    assert r.top_heads(5) == s.top(5, "heads", first=r.key_rule) == s.top(5, "heads")  # top3 is the ranking's head
