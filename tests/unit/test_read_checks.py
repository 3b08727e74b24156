"""Read values checked against what they claim (issue 41): every tensor a result file holds is checked by shape,
dtype, finiteness and element count before anything it implies is allocated (:func:`circuits.io.check_loaded`,
:class:`circuits.io.Shapes`); ``Scores.load`` and ``SweepResult.load`` read through them; MIB's writer and reader
agree; a report lists an impossible result as unreadable and draws the rest, and never follows a link out of its
input. Every file here is crafted in ``tmp_path``; each case failed on the code before (a raw TypeError, KeyError or
AttributeError, a silent load, an empty ranking, or a report that failed whole)."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch
from result_cases import write_identify

from circuits.explain.fourier import NumberSpectra, fourier_spectrum
from circuits.explain.numbers.config import NumbersConfig
from circuits.explain.numbers.result import NumbersResult
from circuits.identify.result import IdentifyResult
from circuits.io import check_loaded, load_torch, save_torch
from circuits.patching.core.metrics import Baseline
from circuits.patching.core.scores import Scores
from circuits.patching.engines.eap_ig import EAPIGScores, eap_receivers, eap_senders
from circuits.patching.engines.end_sweep import SweepResult
from circuits.patching.engines.end_sweep_files import TAG
from circuits.patching.interchange import mib
from circuits.patching.core.readouts import Readouts
from circuits.results import ResultError, load_result, same
from circuits.types import Component, Head
from circuits.validate.config import KnockoutConfig
from circuits.validate.knockout import KnockoutCurve, KnockoutResult
from circuits.viz.report import build_report, collect

L, H, N = 2, 4, 3  # layers, heads, pairs of the crafted files


def baseline(n: int = N) -> Baseline:
    g = torch.Generator().manual_seed(n)
    return Baseline(torch.arange(n), torch.arange(n) + 1, *(torch.rand(n, generator=g) for _ in range(6)))


def one_line(err: BaseException, name: str) -> str:
    text = str(err)
    assert "\n" not in text and name in text, text
    return text


# --- the loader: a tensor declaring more than its file stores ----------------------------------------------------

def test_a_stride_0_tensor_of_3e8_elements_in_a_small_file_is_refused_before_anything_is_allocated(tmp_path):
    path = tmp_path / "numbers.pt"
    torch.save({"effects": torch.zeros(1).expand(300_000_000)}, path)  # torch.save keeps the 4-byte storage
    assert path.stat().st_size < 4096
    with pytest.raises(ValueError) as info:
        load_torch(path, "numbers result")
    text = one_line(info.value, str(path))
    assert "effects is a tensor of shape [300000000] (300,000,000 elements, 1,200,000,000 bytes) over 4 stored bytes" \
        in text and "declares more than the file holds" in text


@pytest.mark.parametrize("tensor, says", [
    (torch.zeros(1, 1).expand(30000, 30000), "over 4 stored bytes"),
    (torch.zeros(3, 3).to_sparse(), "sparse_coo tensor"),
    (torch.zeros(3, dtype=torch.complex64), "complex64 tensor"),
], ids=["expand", "sparse", "complex"])
def test_what_circuits_never_writes_is_refused_wherever_it_sits_in_the_file(tmp_path, tensor, says):
    path = tmp_path / "x.pt"
    torch.save({"a": [1, {"b": tensor}]}, path)
    with pytest.raises(ValueError, match=f"a\\[1\\].b is a .*{says}"):
        load_torch(path)


def test_views_and_expanded_tensors_circuits_saves_load_back(tmp_path):
    base = torch.arange(12.0).reshape(3, 4)
    obj = {"view": base[:, 1], "expanded": torch.ones(1).expand(5)}
    back = load_torch(save_torch(obj, tmp_path / "v.pt"))  # the writer stores an expanded tensor whole
    assert same(back["view"], base[:, 1]) and same(back["expanded"], torch.ones(5))
    check_loaded(back, "v.pt")


# --- Scores.load: 13 crafted files, each one line ---------------------------------------------------------------

def scores_dict() -> dict:
    return Scores({"heads": torch.randn(L, H), "mlps": torch.randn(L)}, "fraction", -1, baseline(), engine="exact-path",
                  per_pair={"heads": torch.randn(L, H, N), "mlps": torch.randn(L, N)}).to_dict()


DROP = object()  # a field left out of the file
SCORES_CASES = {
    "a list": ([1, 2], "holds a list, not the dictionary Scores.save writes"),
    "no parts": ({"parts": DROP}, "lacks parts"),
    "parts a list": ({"parts": [1]}, "parts is [1], not a dictionary of part -> tensor"),
    "a part of text": ({"parts": {"heads": "x"}}, "parts.heads is a str, not a tensor [layer, head]"),
    "an unknown part": ({"parts": {"attn": torch.zeros(2)}}, "parts names 'attn', not a part"),
    "metric 7": ({"metric": 7}, "metric is 7 (int), not str"),
    "sign 'a'": ({"sign": "a"}, "sign is 'a', not -1"),
    "offsets 'yes'": ({"offsets": "yes"}, "offsets is 'yes' (str), not bool"),
    "labels None": ({"labels": None}, "labels is None, not a dictionary"),
    "baseline text": ({"baseline": "x"}, "baseline is a str, not the baseline's tensors"),
    "per-pair of another shape": ({"per_pair": {"heads": torch.randn(5, 5, 5)}},
                                  "per_pair.heads has shape [5, 5, 5]: 5 along its layer axis, where parts.heads has 2"),
    "baseline of another pair count": ({"baseline": {**baseline().to_dict(), "logit": torch.zeros(7)}},
                                       "baseline.logit has shape [7]: 7 along its pair axis, where per_pair.heads has 3"),
    "infinite part": ({"parts": {"heads": torch.full((L, H), math.inf), "mlps": torch.zeros(L)}},
                      "parts.heads holds infinite values"),
    "stride 0": ({"parts": {"heads": torch.zeros(1, 1).expand(10000, 30000), "mlps": torch.zeros(L)}},
                 "declares more than the file holds"),
}


@pytest.mark.parametrize("change, says", SCORES_CASES.values(), ids=SCORES_CASES.keys())
def test_a_crafted_scores_file_is_one_line_naming_it(tmp_path, change, says):
    path = tmp_path / "s.pt"
    d = {k: v for k, v in {**scores_dict(), **change}.items() if v is not DROP} if isinstance(change, dict) else change
    torch.save(d, path)
    with pytest.raises(ValueError) as info:
        Scores.load(path)
    assert says in one_line(info.value, str(path))


def test_scores_and_eap_ig_scores_still_load_back_equal(tmp_path):
    d = scores_dict()
    back = Scores.load(Scores.from_dict(d).save(tmp_path / "s.pt"))
    assert same(back.parts, d["parts"]) and same(back.per_pair, d["per_pair"]) and back.metric == "fraction"
    e = EAPIGScores.of("prob", "prob", baseline(), 4, "all", torch.randn(N), torch.randn(L, H, N), torch.randn(L, N))
    back = EAPIGScores.load(e.save(tmp_path / "e.pt"))
    assert type(back) is EAPIGScores and same(back.head, e.head) and same(back.parts, e.parts)
    torch.save({**e.to_dict(), "mlp": torch.randn(L, N + 1)}, tmp_path / "bad.pt")
    with pytest.raises(ValueError, match=r"bad.pt: mlp has shape \[2, 4\]: 4 along its pair axis, where input has 3"):
        EAPIGScores.load(tmp_path / "bad.pt")


# --- SweepResult.load and identify's sweep.pt ------------------------------------------------------------------

def sweep(n: int = N) -> SweepResult:
    g = torch.Generator().manual_seed(1)
    return SweepResult("path", baseline(n), Readouts(*(torch.rand(L, H, n, generator=g) for _ in range(3))),
                       Readouts(*(torch.rand(L, n, generator=g) for _ in range(3))))


def damaged_sweep(tmp_path, **change):
    folder = sweep().save(tmp_path / "s")
    t = torch.load(folder / "sweep.pt", weights_only=True)
    torch.save({**t, **change}, folder / "sweep.pt")
    return folder


def test_a_saved_sweep_with_a_baseline_of_another_pair_count_is_refused_on_load(tmp_path):
    folder = damaged_sweep(tmp_path, baseline=baseline(5).to_dict())
    with pytest.raises(ResultError) as info:
        SweepResult.load(folder)
    assert "baseline.answer has shape [5]: 5 along its pair axis, where sweep.json has 3" in one_line(info.value, "sweep.pt")


def test_a_sweep_declaring_30000_x_30000_x_2_in_a_few_kilobytes_is_refused_on_load(tmp_path):
    huge = torch.zeros(1, 1, 1).expand(30000, 30000, 2)
    folder = damaged_sweep(tmp_path, head_logit=huge, head_logit_diff=huge, head_prob=huge)
    assert (folder / "sweep.pt").stat().st_size < 8192
    with pytest.raises(ResultError) as info:
        SweepResult.load(folder)
    assert "declares more than the file holds" in one_line(info.value, "sweep.pt")


def test_an_all_nan_sweep_is_refused_not_an_empty_ranking(tmp_path):
    nan = lambda *shape: torch.full(shape, math.nan)  # noqa: E731
    change = {f"head_{r}": nan(L, H, N) for r in ("logit", "logit_diff", "prob")}
    change |= {f"mlp_{r}": nan(L, N) for r in ("logit", "logit_diff", "prob")}
    folder = damaged_sweep(tmp_path, **change)
    with pytest.raises(ResultError, match="head_logit and mlp_logit are NaN everywhere: nothing was measured"):
        SweepResult.load(folder)
    # the same sweep.pt in an identify result: refused by the result's reader (the report, --heads-from)
    res = write_identify(tmp_path / "res", "addition")
    torch.save(torch.load(folder / "sweep.pt", weights_only=True), res / "sweep.pt")
    summary = json.loads((res / "summary.json").read_text())
    summary["head_effects"] = [[0.0] * H] * L
    (res / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ResultError) as info:
        IdentifyResult.load(res)
    assert "nothing was measured" in one_line(info.value, "sweep.pt")


def test_a_sweep_whose_custom_metric_has_another_shape_is_refused(tmp_path):
    folder = damaged_sweep(tmp_path, custom={"m": [torch.zeros(L, H, N), torch.zeros(L + 1, N)]})
    with pytest.raises(ResultError, match=r"custom.m\[1\] has shape \[3, 3\]: 3 along its layer axis"):
        SweepResult.load(folder)


def test_a_sweep_saved_with_a_meta_file_still_loads_back_equal(tmp_path):
    s = sweep()
    back = SweepResult.load(s.save(tmp_path / "s"))
    assert same(back.tensors(), s.tensors())
    assert json.loads((tmp_path / "s" / "sweep.json").read_text())["format"] == TAG


# --- MIB: writer and reader agree --------------------------------------------------------------------------------

def test_mib_read_refuses_nan_and_infinity_scores(tmp_path):
    g = mib.MIBGraph.from_tensors(1, 2, 8, heads=torch.tensor([[0.5, 0.25]]), mlps=torch.tensor([0.125]))
    d = g.to_json()
    for bad in ("NaN", "Infinity", "-Infinity"):
        edge = next(iter(d["edges"]))
        text = json.dumps(d).replace(json.dumps({edge: d["edges"][edge]})[1:-1],
                                     f'"{edge}": {{"score": {bad}, "in_graph": false}}')
        (tmp_path / "g.json").write_text(text)
        with pytest.raises(ValueError) as info:
            mib.read(tmp_path / "g.json")
        assert "a finite number, or null where it is not scored" in one_line(info.value, "g.json")


def test_what_to_mib_writes_mib_read_reads(tmp_path):
    s = Scores({"heads": torch.tensor([[0.5, math.nan]]), "mlps": torch.tensor([0.25])}, "fraction", 1)
    with pytest.raises(ValueError, match="The graph's d_model is -5; a whole number >= 1 is expected"):
        s.to_mib(-5)
    with pytest.raises(ValueError, match="infinite"):
        Scores({"heads": torch.tensor([[math.inf, 0.0]]), "mlps": torch.tensor([0.0])}, "fraction", 1).to_mib(8)
    n_s, n_r = len(eap_senders(1, 2)), len(eap_receivers(1, 2))
    edges = torch.rand(n_s, n_r)
    edges[0, 0] = math.nan  # an edge not scored: written as null, read back as not scored
    g = mib.MIBGraph.from_tensors(1, 2, 8, edges=edges)
    back = mib.read(g.write(tmp_path / "g.json"))
    assert back == g and "NaN" not in (tmp_path / "g.json").read_text()


# --- the report: one impossible result fails its own section only ------------------------------------------------

def knockout(acc: float) -> KnockoutResult:
    heads = [Head(1, 2), Head(0, 1), Head(1, 0)]
    curve = KnockoutCurve([0, 1, 3], heads, [0.75, acc, 0.25], [0.5, 0.4, 0.3], [heads[::-1]], [[0.75, 0.75, 0.5]],
                          [[0.5, 0.5, 0.4]])
    return KnockoutResult(KnockoutConfig(model="tiny", task="addition", n_pairs=4, ks=(0, 1, 3), seeds=(0,)), curve,
                          "addition", 4)


def numbers_result() -> NumbersResult:
    g = torch.Generator().manual_seed(0)
    effects = torch.randn(2, 3, 10, generator=g)
    spectra = NumberSpectra([Component("head", 1, 0), Component.mlp(1)], list(range(10)), list(range(10)), effects,
                            fourier_spectrum(effects).mean(1), [1, 2, 3])
    return NumbersResult(NumbersConfig(model="tiny", task="addition", n_pairs=4), spectra)


def test_knockout_accuracy_of_7_5_is_refused_not_drawn_as_750_percent(tmp_path):
    folder = knockout(0.5).save(tmp_path / "ko")
    data = json.loads((folder / "data.json").read_text())
    data["curve"]["effect_accuracy"][1] = 7.5
    (folder / "data.json").write_text(json.dumps(data))
    with pytest.raises(ResultError) as info:
        load_result(folder)
    assert "field 'effect_accuracy' holds 7.5, not a share or probability in [0, 1]" in one_line(info.value, "data.json")


def test_a_short_numbers_pt_is_one_line(tmp_path):
    folder = numbers_result().save(tmp_path / "nu")
    assert load_result(folder) == numbers_result()
    t = torch.load(folder / "numbers.pt", weights_only=True)
    torch.save({**t, "effects": t["effects"][:, :, :7]}, folder / "numbers.pt")  # a number line cut short
    with pytest.raises(ResultError) as info:
        load_result(folder)
    assert "effects has shape [2, 3, 7]: 7 along its number axis, where numbers has 10" in one_line(info.value, "numbers.pt")


def test_the_report_lists_impossible_results_as_unreadable_and_draws_the_rest(tmp_path):
    root = tmp_path / "res"
    write_identify(root, "addition")
    bad_ko = knockout(0.5).save(root / "ko")
    data = json.loads((bad_ko / "data.json").read_text())
    data["curve"]["effect_accuracy"][1] = 7.5
    (bad_ko / "data.json").write_text(json.dumps(data))
    short = numbers_result().save(root / "nu")
    t = torch.load(short / "numbers.pt", weights_only=True)
    torch.save({**t, "energy": t["energy"][:1]}, short / "numbers.pt")
    mismatch = write_identify(root / "other", "subtraction")
    torch.save(sweep(N).tensors(), mismatch / "sweep.pt")  # 2 x 4 heads where its summary has 6 x 4
    found, _, broken = collect([root])
    assert [f.kind for f in found] == ["identify"]
    reasons = dict(broken)
    assert set(reasons) == {bad_ko, short, mismatch}
    assert "effect_accuracy' holds 7.5" in reasons[bad_ko]
    assert "energy has shape [1, 6]: 1 along its component axis, where components has 2" in reasons[short]
    assert "head_logit has shape [2, 4, 3]: 2 along its layer axis, where summary.json's head_effects has 6" \
        in reasons[mismatch]
    page = build_report([root])
    assert "Results that could not be read" in page and "750%" not in page
    assert "addition: path patching at END" in page  # the good result's section is drawn


def test_the_report_never_follows_a_link_out_of_its_input(tmp_path):
    outside = write_identify(tmp_path / "elsewhere", "subtraction")
    root = tmp_path / "res"
    write_identify(root, "addition")
    os.symlink(outside.parent, root / "link")
    os.symlink("/", root / "root")
    found, unknown, broken = collect([root])
    assert [f.path for f in found] == [root / "addition"] and unknown == [] and broken == []


def test_a_config_string_reaches_a_plotly_title_as_text_not_markup(tmp_path):
    """Plotly draws ``<a href=...>`` in a title as a link: a model name read from a config is escaped first."""
    from dataclasses import replace

    from result_cases import identify_from_effects

    link = "<a href='https://example.com'>evil</a>"
    r = identify_from_effects()
    r = replace(r, config=replace(r.config, model=link))
    back = load_result(r.save(tmp_path / "res"))
    title = back.figure().layout.title.text
    assert "&lt;a" in title and "href='https://example.com'&gt;evil&lt;/a&gt;" in title  # (wrapped at the space)
    assert "<a" not in title and "</a>" not in title
    numbers = numbers_result()
    numbers = NumbersResult(replace(numbers.config, model="<b>m</b>"), numbers.spectra)
    assert "&lt;b&gt;m&lt;/b&gt;" in numbers.figure().layout.title.text


def test_a_prompt_longer_than_the_models_context_is_one_line_before_the_work(tiny_llama, tmp_path):
    from circuits.data.pairs import PromptError, as_batch, check_token_ids, make_pair, read_pairs_file

    n_ctx = tiny_llama.cfg.n_ctx
    long = "word " * (n_ctx + 10)
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", "counterfactual": "1+2=", "answer": "2"}) + "\n"
                    + json.dumps({"prompt": long + "1+1=", "counterfactual": long + "1+2=", "answer": "2"}) + "\n")
    with pytest.raises(ValueError) as info:
        read_pairs_file(tiny_llama, path)
    text = one_line(info.value, "p.jsonl, line 2: the prompt is ")
    assert f"tokens, longer than the model's context of {n_ctx}" in text
    pair = make_pair(tiny_llama.tokenizer, long + "1+1=", long + "1+2=", "2")
    with pytest.raises(PromptError, match=f"longer than the model's context of {n_ctx}"):
        as_batch([pair], tiny_llama)
    with pytest.raises(PromptError, match=r"res/pairs.jsonl, pair 1: the prompt is \d+ tokens, longer than"):
        check_token_ids([pair], tiny_llama.cfg.d_vocab, "res/pairs.jsonl", n_ctx)


def test_heads_from_a_model_whose_weights_changed_since_identify_is_named(tmp_path):
    import warnings

    from helpers import tiny_model

    from circuits.identify.job import identify
    from circuits.identify.source import WeightsChangedWarning, source_result
    from circuits.models.fingerprint import same_weights, weights_fingerprint

    model = tiny_model("llama")  # its own: this test changes a weight
    model.requires_grad_(False)
    r = identify(model, task="addition", n_pairs=2, few_shot="on", filter_correct=False, bootstrap=0,
                 progress=False, warn=False)
    folder = r.save(tmp_path / "res")
    assert load_result(folder).weights == r.weights == weights_fingerprint(model) != ""
    config = KnockoutConfig(model="tiny", heads_from=str(folder), ks=(0, 1), seeds=(0,))
    with warnings.catch_warnings():
        warnings.simplefilter("error", WeightsChangedWarning)
        source_result(config, model)  # the same weights: nothing said
    param = next(p for n, p in sorted(model.named_parameters()) if p.ndim >= 2 and "attn" in n)
    with torch.no_grad():
        param.add_(0.01)  # as a fine-tuning step would
    assert weights_fingerprint(model) != r.weights
    with pytest.warns(WeightsChangedWarning, match=r"--heads-from .*res was identified on other weights than the "
                                                   r"model loaded now \(tiny: fingerprint"):
        source_result(config, model)
    assert same_weights("", r.weights) is None and same_weights("bridge/float32/0", "hooked/float32/0") is None


# --- the other engines' files: every tensor cut short along its first axis is named ----------------------------

def engine_sweeps() -> dict:
    from circuits.patching.engines.edge_sweep import EdgeSweep
    from circuits.patching.engines.neuron_sweep import NeuronSweep
    from circuits.patching.engines.position_sweep import PositionSweep
    from circuits.types import Neuron, Receiver

    r = lambda *shape: Readouts(*(torch.rand(*shape) for _ in range(3)))  # noqa: E731
    senders, receivers = [Component("head", 0, 1), Component.mlp(0)], Receiver.parse_many("1.0.q,1.2.v,MLP1")
    neurons = [Neuron(0, 3), Neuron(1, 7)]
    return {
        "edges": EdgeSweep(baseline(), senders, receivers, r(2, 3, N)),
        "neurons": NeuronSweep("path", baseline(), neurons, r(2, N)),
        "positions": PositionSweep(baseline(), r(L, H, 5, N), r(L, 5, N), r(2, 5, N), neurons,
                                   torch.tensor([7, 8, 9]), torch.tensor([2, 3, 4])),
    }


def tensor_paths(obj, path=()):
    if isinstance(obj, torch.Tensor):
        yield path
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from tensor_paths(v, (*path, k))


CUTS = [(kind, p) for kind, s in engine_sweeps().items() for p in tensor_paths(s.tensors())]


@pytest.mark.parametrize("kind, where", CUTS, ids=[f"{k}:{'.'.join(p)}" for k, p in CUTS])
def test_an_engine_file_with_a_tensor_cut_short_is_one_line_naming_it(tmp_path, kind, where):
    sweep = engine_sweeps()[kind]
    path = save_torch(sweep.tensors(), tmp_path / f"{kind}.pt")
    back = type(sweep).from_tensors(load_torch(path), path)
    assert same(back.tensors(), sweep.tensors())
    t = load_torch(path)
    holder = t
    for k in where[:-1]:
        holder = holder[k]
    holder[where[-1]] = holder[where[-1]][:-1].clone()
    torch.save(t, path)
    with pytest.raises(ValueError) as info:
        type(sweep).from_tensors(load_torch(path), path)
    text = one_line(info.value, str(path))  # the cut tensor, or the first one met after it, named beside it
    assert "has shape" in text and ".".join(where) in text


def test_a_screen_with_graddrop_loads_back_and_a_short_tensor_in_it_is_named(tiny_llama, tmp_path):
    from circuits.beyond.screen.config import ScreenConfig
    from circuits.beyond.screen.job import screen
    from circuits.data.pairs import build_pairs

    pairs = build_pairs(tiny_llama, "addition", n_pairs=2, filter_correct=False, few_shot="on", progress=False).pairs
    r = screen(tiny_llama, pairs, ScreenConfig(model="tiny", task="addition", n_pairs=2, few_shot="on",
                                               filter_correct=False, verify=1, grad_drop=True), progress=False)
    assert r.graddrop
    folder = r.save(tmp_path / "sc")
    assert load_result(folder) == r
    t = torch.load(folder / "screen.pt", weights_only=True)
    torch.save({**t, "head_q": t["head_q"][:, :-1]}, folder / "screen.pt")
    with pytest.raises(ResultError) as info:
        load_result(folder)
    assert "head_q has shape" in one_line(info.value, "screen.pt") and "along its head axis" in str(info.value)


# --- every kind: each tensor of its saved files one row short is refused in one line -----------------------------

@pytest.fixture(scope="module")
def every_kind(tiny_llama, tmp_path_factory):
    from result_cases import build_results

    root = tmp_path_factory.mktemp("kinds")
    return {kind: r.save(root / kind) for kind, r in build_results(tiny_llama, tmp_path_factory.mktemp("jobs")).items()}


def test_every_tensor_of_every_kinds_files_cut_short_is_refused_in_one_line(every_kind):
    """165 tensors over identify (sweep.pt, edges.pt), screen, positions, neurons, heuristics, edges, faithfulness and
    numbers on the tiny model; a new kind's files are covered by being in tests/result_cases.py."""
    checked, loaded = 0, []
    for kind, folder in every_kind.items():
        for pt in sorted(folder.glob("*.pt")):
            original = pt.read_bytes()
            t = torch.load(pt, weights_only=True)
            for where in tensor_paths(t):
                holder = t
                for k in where[:-1]:
                    holder = holder[k]
                value = holder[where[-1]]
                if value.ndim == 0 or value.shape[0] < 2:
                    continue
                holder[where[-1]] = value[:-1].clone()
                torch.save(t, pt)
                try:
                    load_result(folder)
                    loaded.append(f"{kind}/{pt.name}:{'.'.join(map(str, where))}")
                except ResultError as err:
                    one_line(err, pt.name)
                holder[where[-1]] = value
                pt.write_bytes(original)
                checked += 1
    assert loaded == [] and checked >= 150, (checked, loaded)


def test_an_accuracy_outside_0_1_in_any_results_table_is_refused(tmp_path):
    from circuits.validate.transfer import TransferConfig, TransferResult

    r = TransferResult(TransferConfig(model="tiny", task="addition", n_pairs=4, n_key_heads=2),
                       {"svamp": {"n": 3, "accuracy_before": 0.5, "accuracy_after": 0.25, "accuracy_random_heads": 0.5}},
                       [Head(1, 2), Head(0, 1)], [Head(0, 0), Head(1, 3)], {"svamp": "Q: 3 apples and 4 more? A:"})
    folder = r.save(tmp_path / "tr")
    assert load_result(folder) == r
    text = (folder / "data.json").read_text()
    (folder / "data.json").write_text(text.replace('"accuracy_after": 0.25', '"accuracy_after": 1.5'))
    with pytest.raises(ResultError) as info:
        load_result(folder)
    assert "svamp.accuracy_after is 1.5, not a share in [0, 1]" in one_line(info.value, "tr")


# --- faithfulness.pt: a ranking's edge scores by shape and finiteness, as its node scores -------------------------

def test_faithfulness_edge_scores_are_checked_by_shape_and_finiteness(tiny_llama, tmp_path):
    """The edge scores of an EAP-IG ranking are [sender, receiver] of the model its head scores are of (1 + L (H + 1)
    senders, L (3H + 1) + 1 receivers) and finite; before issue 41's re-run they were checked for kind only, so a
    table one row short, of one axis, or holding NaN loaded and failed (or ranked wrongly) later."""
    from circuits.beyond.faithfulness.config import FaithfulnessConfig
    from circuits.beyond.faithfulness.job import faithfulness
    from circuits.data.pairs import build_pairs

    pairs = build_pairs(tiny_llama, "addition", n_pairs=2, filter_correct=False, few_shot="on", progress=False).pairs
    r = faithfulness(tiny_llama, pairs, FaithfulnessConfig(model="tiny", rankings=("eap-ig",), sizes=(0.2, 0.5),
                                                           positions=("end",), n_boot=0), progress=False)
    folder = r.save(tmp_path / "f")
    L, H = tiny_llama.cfg.n_layers, tiny_llama.cfg.n_heads
    assert tuple(r.scores["eap-ig"]["edges"].shape) == (1 + L * (H + 1), L * (3 * H + 1) + 1)
    back = load_result(folder)  # a real result loads back as it was
    assert all(torch.equal(back.scores["eap-ig"][k], v) for k, v in r.scores["eap-ig"].items())
    pt = folder / "faithfulness.pt"
    original = pt.read_bytes()
    edges = r.scores["eap-ig"]["edges"]
    for bad, says in ((edges[:-1], f"scores.eap-ig.edges has shape [{1 + L * (H + 1) - 1}, {L * (3 * H + 1) + 1}]: "
                                   f"{1 + L * (H + 1) - 1} along its sender axis, where scores.eap-ig.heads's {L} "
                                   f"layers x {H} heads has {1 + L * (H + 1)}"),
                      (edges.flatten(), "scores.eap-ig.edges has shape"),
                      (edges.clone().fill_(float("nan")), "scores.eap-ig.edges holds NaN or infinite values"),
                      (edges.clone().index_fill_(0, torch.tensor([1]), float("inf")), "holds NaN or infinite values")):
        t = torch.load(pt, weights_only=True)
        t["scores"]["eap-ig"]["edges"] = bad
        torch.save(t, pt)
        with pytest.raises(ResultError) as info:
            load_result(folder)
        assert says in one_line(info.value, "faithfulness.pt"), str(info.value)
        pt.write_bytes(original)


def test_a_mean_answer_probability_outside_0_1_is_unreadable_and_the_rest_renders(tmp_path):
    """Issue 41's re-run: an identify result whose pair statistics hold a mean answer probability of 1.5, or a transfer
    table whose probability before the knockout is 1.2, was drawn; now each is listed as unreadable with its reason
    (``circuits.results.PROB_KEYS``) and the good result beside them is drawn."""
    from circuits.validate.transfer import TransferConfig, TransferResult

    root = tmp_path / "res"
    write_identify(root, "addition")
    bad = write_identify(root / "bad", "subtraction")
    s = json.loads((bad / "summary.json").read_text())
    s["pair_stats"] = {**(s.get("pair_stats") or {}), "mean_answer_prob": 1.5}
    (bad / "summary.json").write_text(json.dumps(s))
    tr = TransferResult(TransferConfig(model="tiny", task="addition", n_pairs=4, n_key_heads=2),
                        {"svamp": {"n": 3, "accuracy_before": 0.5, "accuracy_after": 0.25, "prob_before": 0.4,
                                   "prob_after": 0.3}}, [Head(1, 2), Head(0, 1)], [Head(0, 0), Head(1, 3)],
                        {"svamp": "Q: 3 apples and 4 more? A:"}).save(root / "tr")
    assert load_result(tr).results["svamp"]["prob_before"] == 0.4  # in range: read as written
    (tr / "data.json").write_text((tr / "data.json").read_text().replace('"prob_before": 0.4', '"prob_before": 1.2'))
    found, _, broken = collect([root])
    reasons = dict(broken)
    assert [f.path for f in found] == [root / "addition"] and set(reasons) == {bad, tr}
    assert "pair_stats.mean_answer_prob is 1.5, not a probability in [0, 1]" in reasons[bad]
    assert "svamp.prob_before is 1.2, not a probability in [0, 1]" in reasons[tr]
    page = build_report([root])
    assert "Results that could not be read" in page and "addition: path patching at END" in page
