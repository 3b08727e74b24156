"""The package's import graph has no cycle, neither between modules nor between its first-level packages
(function-local imports counted too), and the command line builds every
parser without importing torch or transformer_lens, so ``circuits --help`` and a bad flag answer at once."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "circuits"


def module_names() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the circuits modules it imports, anywhere in it (top level or inside a function), less the ones under
    ``if TYPE_CHECKING:`` (never run). ``from a import b`` counts as importing ``a.b`` when that is a module."""
    mods = module_names()

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
                node.body = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module for a in node.names]
            else:
                continue
            for name in names:
                target = owner(name) if name.split(".")[0] == "circuits" else None
                if target and target != mod:
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle_through_a_function_local_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_counts_function_local_imports():
    graph = import_graph()
    assert "circuits.identify.job" in graph["circuits.cli.commands"]  # imported inside command_identify only
    assert "circuits.identify.job" in graph["circuits.identify.source"]  # inside source_result only


def package_of(module: str) -> str:
    """``circuits.beyond.edges.job`` -> ``circuits.beyond``: the first-level package (or base module) it belongs to."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """first-level package -> the other first-level packages its modules import (from the module graph)."""
    out: dict[str, set[str]] = {package_of(m): set() for m in graph}
    for mod, targets in graph.items():
        out[package_of(mod)] |= {package_of(t) for t in targets} - {package_of(mod)}
    return out


def test_the_package_graph_lifts_module_arrows():
    g = package_graph({"circuits.a.x": {"circuits.b.y"}, "circuits.b.y": {"circuits.a.z"}, "circuits.a.z": set()})
    assert g == {"circuits.a": {"circuits.b"}, "circuits.b": {"circuits.a"}} and cycles(g) == [["circuits.a", "circuits.b"]]


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_no_package_cycles():
    """No arrow runs back up between first-level packages (data -> viz, identify -> beyond, sft -> evaluation were
    the last): each package sits in one place of the layer table of docs/architecture.md."""
    assert cycles(package_graph(import_graph())) == []


def test_viz_imports_no_step_module():
    steps = ("circuits.identify", "circuits.beyond", "circuits.validate", "circuits.explain", "circuits.sft",
             "circuits.evaluation", "circuits.patching")
    graph = import_graph()
    # the metric registry names a figure's metric and its sign (the one piece of the mechanism a figure needs)
    bad = {m: sorted(t for t in graph[m] if t.startswith(steps) and t != "circuits.patching.core.metrics") for m in graph
           if m.startswith("circuits.viz")}
    assert {m: t for m, t in bad.items() if t} == {}


def test_the_parser_builds_without_torch():
    code = ("import sys, circuits.cli\n"
            "p = circuits.cli.build_parser()\n"
            "for argv in (['identify', '--pairs', '8', '--out', 'x'], ['screen', '--out', 'x'], ['finetune', '--out', 'x'],\n"
            "             ['stability', '--pairs', '4', '--out', 'x'], ['evaluate', '--out', 'x'], ['export', '--delta', 'd', '--out', 'x']):\n"
            "    p.parse_args(argv)\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformer_lens', 'transformers'))\n"
            "print(heavy[:5])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_a_bad_flag_is_one_line_without_torch():
    code = ("import sys, circuits.cli\n"
            "try:\n"
            "    circuits.cli.main(['identify', '--n-pairs', '8', '--out', 'x'])\n"
            "except SystemExit as e:\n"
            "    print(e.code, 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "2 False"
    assert "unrecognized arguments: --n-pairs 8" in out.stderr


# The layers of docs/architecture.md, the bottom first: a module may import its own layer and those below it.
BASE = ("circuits.types", "circuits.versions", "circuits.io", "circuits.config", "circuits.timing", "circuits.threads", "circuits.lazy", "circuits.jobs",
        "circuits.distributed", "circuits.results")
LAYERS = {
    "circuits.models": BASE,
    "circuits.data": (*BASE, "circuits.models"),
    "circuits.patching": (*BASE, "circuits.models", "circuits.data"),
    "circuits.viz": (*BASE, "circuits.patching.core.metrics"),  # a figure's metric: its name, sign and meaning
}
# the jobs, on the mechanism and the figures: identify first, the steps that read its result next, then those that run
# another step's job (the neuron job runs the knockout; an evaluation applies a fine-tuned delta)
BELOW_JOBS = (*BASE, "circuits.models", "circuits.data", "circuits.patching", "circuits.viz")
LAYERS |= {
    "circuits.identify": BELOW_JOBS,
    "circuits.validate": (*BELOW_JOBS, "circuits.identify"),
    "circuits.explain": (*BELOW_JOBS, "circuits.identify"),
    "circuits.sft": (*BELOW_JOBS, "circuits.identify"),
    "circuits.beyond": (*BELOW_JOBS, "circuits.identify", "circuits.validate", "circuits.explain"),  # heuristics
    "circuits.evaluation": (*BELOW_JOBS, "circuits.sft"),
}


def test_each_layer_imports_only_the_layers_below_it():
    graph = import_graph()
    base = {m: sorted(t for t in graph[m] if not t.startswith(BASE)) for m in graph if m.startswith(BASE)}
    assert {m: t for m, t in base.items() if t} == {}
    for layer, allowed in LAYERS.items():
        bad = {m: sorted(t for t in graph[m] if not t.startswith((layer, *allowed))) for m in graph
               if m == layer or m.startswith(layer + ".")}
        assert {m: t for m, t in bad.items() if t} == {}, layer
