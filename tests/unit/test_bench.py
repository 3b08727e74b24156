"""benchmarks/_bench.py, the module every benchmark shares: timing with warm-up and repeats, the last line, the
threads; and every benchmark uses it and still ends with the ratio names the docs quote."""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

import pytest
import torch

import _bench

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

# The names of each benchmark's last line, in order (docs/speed.md, docs/results.md, docs/finetune.md quote them).
LAST_LINES = {
    "attention_speed": ["speedup_attention", "max_abs_diff", "same_choices"],
    "eval_speed": ["speedup", "max_abs_diff"],
    "gpu_scale": ["path_s", "activation_s", "precise_sps", "full_sps", "precise_peak_gib"],
    "knockout_speed": ["curve_seconds", "speedup_knockout", "every_layer_seconds", "speedup_first_layer",
                       "max_abs_prob_diff"],
    "pipeline_speed": ["demo_s", "figures_s"],
    "position_sweep": ["speedup_position", "max_abs_diff"],
    "screen_speed": ["screen_seconds", "speedup_screen", "max_abs_diff"],
    # the longest: --backend bridge's (HookedTransformer's: speedup_path ... max_abs_diff, same_layout_path/activation)
    "sweep_speed": ["speedup_path", "speedup_activation", "max_abs_diff", "engine_path_s", "engine_activation_s",
                    "hooked_path_s", "hooked_activation_s", "vs_hooked_path", "vs_hooked_activation"],
    "train_speed": ["speedup", "limit"],
}


def test_measure_warms_up_once_and_keeps_the_fastest_repeat(monkeypatch):
    import types

    # _bench's clocks advanced only by fn's own "sleep": the fastest repeat is known exactly on any machine
    clock = {"wall": 0.0, "cpu": 0.0}
    monkeypatch.setattr(_bench, "time", types.SimpleNamespace(perf_counter=lambda: clock["wall"],
                                                              process_time=lambda: clock["cpu"]))
    calls, warm = [], []
    sleeps = iter([0.03, 0.01, 0.02])

    def fn():
        calls.append(1)
        step = next(sleeps)
        clock["wall"] += step
        clock["cpu"] += step / 2
        return len(calls)

    t = _bench.measure(fn, warmup=lambda: warm.append(1), repeat=3)
    assert warm == [1] and len(calls) == 3 and t.value == 3 and len(t.runs) == 3
    assert t.seconds == min(t.runs) and t.runs.index(t.seconds) == 1
    assert t.seconds == pytest.approx(0.01) and t.cpu_seconds >= 0
    calls.clear()
    sleeps = iter([0.0, 0.0])
    assert _bench.measure(fn, warmup=True).value == 2  # the warm-up is fn itself, untimed
    synced = []
    _bench.measure(lambda: None, repeat=2, sync=lambda: synced.append(1))
    assert synced == [1, 1, 1, 1]  # before and after each timed run
    with pytest.raises(ValueError, match="accepted: 1 or more"):
        _bench.measure(fn, repeat=0)


def test_last_line_formats_and_parses_back(tmp_path):
    line = _bench.last_line(speedup_path=127.84, speedup=2.891, max_abs_diff=7.25e-05, tiny=0.00412, same_choices=True,
                            n=3, missing=float("nan"), zero_diff=0.0)
    assert line == ("speedup_path=127.8 speedup=2.89 max_abs_diff=7.25e-05 tiny=0.00412 same_choices=True n=3 "
                    "missing=nan zero_diff=0.00e+00")
    assert _bench.parse_last_line(line)["max_abs_diff"] == "7.25e-05"
    assert list(_bench.parse_last_line(line)) == ["speedup_path", "speedup", "max_abs_diff", "tiny", "same_choices", "n",
                                                  "missing", "zero_diff"]
    with pytest.raises(ValueError, match="accepted: name=value pairs"):
        _bench.parse_last_line("speedup 2.0")
    with pytest.raises(ValueError, match="at least one"):
        _bench.last_line()

    args = argparse.Namespace(json=str(tmp_path / "n.json"))
    assert _bench.finish(args, {"stages": {"load": 1.5}}, speedup=torch.tensor(2.5), max_abs_diff=0.0) == \
        "speedup=2.50 max_abs_diff=0.00e+00"
    saved = json.loads((tmp_path / "n.json").read_text())
    assert saved["speedup"] == 2.5 and saved["stages"] == {"load": 1.5}
    assert set(saved["machine"]) == {"threads", "omp_wait_policy", "load_average", "cores"}


def test_threads_flag_and_the_command_line_rule(monkeypatch):
    before = torch.get_num_threads()
    try:
        parser = argparse.ArgumentParser()
        _bench.add_arguments(parser, threads=1)
        assert _bench.setup(parser.parse_args([])) == 1 == torch.get_num_threads()
        parser = argparse.ArgumentParser()
        _bench.add_arguments(parser, json_flag=False)
        assert not hasattr(parser.parse_args([]), "json")
        monkeypatch.setenv("CIRCUITS_THREADS", "2")
        assert _bench.setup(parser.parse_args([])) == 2 == torch.get_num_threads()  # circuits.threads' rule
        for bad in ("0", "-1", "x"):  # argparse's one line, before any setup
            with pytest.raises(SystemExit):
                parser.parse_args(["--threads", bad])
    finally:
        torch.set_num_threads(before)


def _old_sample(n_layers, n_heads, k, mlp_share, head_step):
    """The two benchmarks' own samplers before they shared one (sweep_speed: 5, 5; gpu_scale: 6, 7)."""
    n_mlp = max(1, k // mlp_share)
    heads = [("head", (i * n_layers) // (k - n_mlp), (i * head_step) % n_heads) for i in range(k - n_mlp)]
    return heads + [("mlp", (i * n_layers) // n_mlp + n_layers // (2 * n_mlp), None) for i in range(n_mlp)]


@pytest.mark.parametrize("shape", [(30, 9, 15, 5, 5), (30, 9, 6, 5, 5), (32, 32, 24, 6, 7), (8, 8, 8, 6, 7)])
def test_sample_components_is_each_benchmark_s_old_sample(shape):
    L, H, k, share, step = shape
    got = _bench.sample_components(L, H, k, mlp_share=share, head_step=step)
    assert [(c.kind, c.layer, c.head if c.kind == "head" else None) for c in got] == _old_sample(L, H, k, share, step)


def test_choice_requests_and_sweep_values():
    reqs = _bench.choice_requests([{"prompt": "Q1", "labels": ["A", "B"]}, {"prompt": "Q2", "labels": ["C"]}])
    assert [r.args for r in reqs] == [("Q1", " A"), ("Q1", " B"), ("Q2", " C")]

    from circuits.types import Component

    class Swept:
        head_logit, head_logit_diff, head_prob = torch.arange(24.).reshape(2, 3, 4), -torch.ones(2, 3, 4), torch.zeros(2, 3, 4)
        mlp_logit, mlp_logit_diff, mlp_prob = torch.arange(8.).reshape(2, 4), torch.ones(2, 4), torch.full((2, 4), 0.5)

    logit, _, _ = _bench.sweep_values(Swept, Component("head", 1, 2))
    assert logit.tolist() == [20.0, 21.0, 22.0, 23.0]
    assert [v.tolist() for v in _bench.sweep_values(Swept, Component.mlp(1))] == [[4., 5., 6., 7.], [1.] * 4, [.5] * 4]
    assert _bench.max_abs_diff([torch.zeros(3), torch.ones(2)], [torch.tensor([0., 0.5, 0.]), torch.ones(2)]) == 0.5


@pytest.mark.parametrize("name", sorted(LAST_LINES))
def test_every_benchmark_uses_the_shared_module_and_keeps_its_names(name):
    tree = ast.parse((BENCHMARKS / f"{name}.py").read_text())
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    first_torch = next((i for i, n in enumerate(imports) if any(a.name.split(".")[0] in ("torch", "circuits")
                                                                for a in getattr(n, "names", []))
                        or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in ("torch", "circuits"))),
                       len(imports))
    bench = [i for i, n in enumerate(imports) if isinstance(n, ast.Import) and n.names[0].name == "_bench"]
    assert bench and bench[0] < first_torch, f"{name}: import _bench before torch and circuits (passive waiting)"
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and isinstance(n.func.value, ast.Name) and n.func.value.id == "_bench"]
    called = {c.func.attr for c in calls}
    assert {"add_arguments", "setup", "finish"} <= called and ("measure" in called or name == "pipeline_speed"), called
    lines = []  # the names of each finish call; the longest is the benchmark's full last line
    for c in calls:
        if c.func.attr == "finish":
            names = []
            for kw in c.keywords:
                if kw.arg is None and isinstance(kw.value, ast.DictComp):  # gpu_scale: **{k: ... for k in (...)}
                    names += [e.value for e in kw.value.generators[0].iter.elts]
                elif kw.arg is not None:
                    names.append(kw.arg)
            lines.append(names)
    assert max(lines, key=len) == LAST_LINES[name]
    assert "time.perf_counter" not in (BENCHMARKS / f"{name}.py").read_text() or name == "pipeline_speed"


def test_counts_and_amounts_take_their_range_and_refuse_the_rest_in_one_line():
    parse = _bench.count(1, 100)
    assert [parse(t) for t in ("1", "100", "07")] == [1, 100, 7]
    size = _bench.amount(1, 1e7)
    assert [size(t) for t in ("1", "4096", "2.5e3")] == [1.0, 4096.0, 2500.0]
    for bad in ("0", "-1", "101", "x", "1.5", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=r"accepted: a whole number from 1 to 100$"):
            parse(bad)
    for bad in ("0", "-1", "nan", "inf", "-inf", "1e8", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"accepted: a number from 1 to 1e\+07$"):
            size(bad)


def test_no_benchmark_flag_takes_a_number_without_its_range():
    """``type=int`` or ``type=float`` take 0, -1 and 1e12 alike: every numeric flag of every benchmark declares its
    range with ``_bench.count`` / ``_bench.amount`` (issue 44's "every flag")."""
    loose = []
    for path in sorted(BENCHMARKS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                kind = next((kw.value for kw in node.keywords if kw.arg == "type"), None)
                if isinstance(kind, ast.Name) and kind.id in ("int", "float"):
                    loose.append(f"{path.name}: {ast.literal_eval(node.args[0])}")
    assert not loose, loose
