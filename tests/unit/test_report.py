"""The report from saved results of every kind: every section, absent sections noted, folders that hold no result,
the command line (the report from what the scripts really write: tests/integration/test_script_results.py)."""

from __future__ import annotations

import re

import pytest
import torch
from result_cases import attention_page, build_results, write_identify, write_identify_all

from circuits.cli import main as cli_main
from circuits.io import write_json
from circuits.patching.core.ranking import KeyRule
from circuits.results import RESULT_TYPES
from circuits.viz.figures import head_heatmap, importance_scale, write_figure
from circuits.viz.page import ASSETS, parse_views
from circuits.viz.report import build_report, collect
from circuits.viz.sections import SECTIONS


@pytest.fixture(scope="module")
def saved(tiny_llama, tmp_path_factory):
    """One saved result of every kind under one folder (the evaluation also as a single .json file)."""
    root = tmp_path_factory.mktemp("results")
    results = build_results(tiny_llama, tmp_path_factory.mktemp("jobs"))
    for kind, r in results.items():
        r.save(root / kind)
    results["evaluate"].save(root / "eval_precise.json")
    return root


def skipped(page: str) -> list[str]:
    """The sections the report lists as not run (said once, grouped)."""
    assert page.count("<h2>Not in the inputs") <= 1
    block = page.split("<ul class='skipped'>", 1)[1].split("</ul>", 1)[0] if "<ul class='skipped'>" in page else ""
    return re.findall(r"<li>(.*?): <code>", block)


def test_every_kind_is_collected(saved):
    found, unknown, broken = collect([saved])
    assert sorted(f.kind for f in found) == sorted([*RESULT_TYPES, "evaluate"]) and unknown == [] and broken == []
    assert {f.path.name for f in found if f.kind == "evaluate"} == {"evaluate", "eval_precise.json"}


def test_report_draws_every_section(saved):
    page = build_report([saved])
    assert "Not in the inputs" not in page
    assert "Precise SFT (top-8 heads)" in page and "1.20M" in page
    assert "Lowest CMD: nodes@end: <b>" in page and "CMD (lower better)" in page  # the faithfulness section
    # the explanations' nulls (issue 43): the heuristics section's null rates and Holm column, the numbers' chance row
    assert "The same test on neurons not chosen for their effect" in page and "as many random neurons of the same MLPs" in page
    assert "class minus random (Holm over" in page and "<td>white noise (chance)</td>" in page


def test_a_folder_of_result_files_without_a_marker_is_no_result(tmp_path):
    folder = tmp_path / "fig3_knockout"
    write_json(folder / "data.json", {"curve": {}, "n_pairs": 8, "task": "addition"})
    write_json(folder / "config.json", {"model": "tiny"})
    found, unknown, broken = collect([tmp_path])
    assert found == [] and unknown == [folder] and broken == []


def test_collect_walks_identify_all_and_dedupes(tmp_path):
    out = write_identify_all(tmp_path)
    found, _, _ = collect([out, out / "addition", out / "addition" / "summary.json"])
    assert sorted(f.result.task for f in found) == sorted(["addition", "subtraction", "multiplication", "division", "all"])


def test_absent_sections_get_a_note(tmp_path):
    write_identify(tmp_path, "addition")
    page = build_report([tmp_path])
    # Key heads are present; the rest (no knockout, no edges or intervals in this identify result) is listed once.
    assert len(skipped(page)) == len(SECTIONS) - 1 and SECTIONS[0].heading not in skipped(page)
    assert "circuits knockout --heads-from" in page
    # the commands name the reader's own identify folder and model, not the README's (issue 40)
    assert f"circuits knockout --heads-from {tmp_path / 'addition'} " in page and "results/identify/addition" not in page
    assert "var CircuitsVis=" not in page  # no views: no bundle
    assert "made by <code>" in page and "key_rule=fraction&gt;=0.05" in page


def test_parse_views_reads_attention_pages():
    views = parse_views(attention_page(["1 + 2 = 3", "5 - 1 = 4"], [(0, 1)]))
    assert [c for c, _, _ in views] == ["1 + 2 = 3", "5 - 1 = 4"]
    assert all(comp == "AttentionHeads" for _, comp, _ in views)
    assert views[0][2]["tokens"] == ["1", "+", "2", "=", "3"] and views[0][2]["attentionHeadNames"] == ["L0H1"]


def test_no_results_is_an_error(tmp_path, capsys):
    with pytest.raises(ValueError, match="no results found"):
        build_report([tmp_path])
    assert cli_main(["report", str(tmp_path), "--out", str(tmp_path / "r.html")]) == 2
    assert "no results found" in capsys.readouterr().err


def test_cli_writes_the_report(tmp_path, capsys):
    write_identify(tmp_path / "res", "addition")
    out = tmp_path / "out" / "report.html"
    assert cli_main(["report", str(tmp_path / "res"), "--out", str(out)]) == 0
    assert out.is_file() and str(out.resolve()) in capsys.readouterr().out
    assert cli_main(["report", str(tmp_path / "res"), "--out", str(out), "--inline"]) == 0
    page = out.read_text()
    assert f"{ASSETS}/" not in page and "plotly.js v" in page  # one file, its JavaScript inside


# --- figures: one colour convention, named metrics, geometry ------------------------------------------------------


@pytest.mark.parametrize("metric, sign", [("fraction", 1), ("relative_logit", -1)])
def test_heatmap_paints_the_important_direction_red(metric, sign):
    heads = torch.zeros(4, 3)
    heads[2, 1] = 0.3 * sign  # the important head
    fig = head_heatmap(heads, torch.zeros(4), metric=metric, key_heads=[(2, 1)])
    trace = fig.data[0]
    scale = trace.colorscale
    # plotly resolves the scale to (position, colour) pairs: the important end is red ("rgb(103,0,31)" in RdBu)
    top = scale[-1][1] if sign > 0 else scale[0][1]
    assert top == "rgb(103,0,31)", scale
    assert importance_scale(sign) == ("RdBu_r" if sign > 0 else "RdBu")
    title = trace.colorbar.title.text
    assert metric in title and "red: important" in title
    assert metric in trace.hovertemplate
    assert ("counterfactual causes" in fig.layout.title.subtitle.text.replace("<br>", " ")) == (metric == "fraction")
    assert fig.layout.shapes[0].x0 == 0.5 and fig.layout.shapes[0].y0 == 1.5  # the box sits on the red cell


def test_fraction_heatmap_never_says_relative_logit():
    fig = head_heatmap(torch.randn(5, 4), torch.randn(5))  # the default metric is fraction
    text = fig.to_json()
    assert "relative change of the answer logit" not in text and "relative_logit" not in text
    assert "fraction" in fig.data[0].colorbar.title.text


def test_heatmap_hover_names_every_metric_that_boxes_and_cells_are_square():
    h, m = torch.randn(30, 9), torch.randn(30)
    fig = head_heatmap(h, m, metric="relative_logit", head_ci=(h - 1, h + 1), mlp_ci=(m - 1, m + 1),
                       also={"fraction": (-h, -m)})
    for trace in fig.data:
        assert "relative_logit" in trace.hovertemplate and "fraction" in trace.hovertemplate
        assert "CI [" in trace.hovertemplate
        assert trace.customdata.shape[-1] == 3  # low, high, fraction
    # float32 on the page, the very values of the float32 effects (issue 44)
    torch.testing.assert_close(torch.tensor(fig.data[0].customdata[..., 2]), -h, atol=0, rtol=0)
    L = fig.layout
    plot_w = L.width - L.margin.l - L.margin.r
    heads_w = plot_w * (L.xaxis.domain[1] - L.xaxis.domain[0])
    plot_h = L.height - L.margin.t - L.margin.b
    assert 0.8 < (heads_w / 9) / (plot_h / 30) < 1.25  # square-ish cells
    gap = plot_w * (L.xaxis2.domain[0] - L.xaxis.domain[1])
    assert gap >= 40 and L.xaxis2.fixedrange and L.yaxis2.fixedrange  # the MLP column's drag layer stays clear


def test_figures_share_one_plotly_copy_inside_their_output(tmp_path):
    """A page writes its plotly.js copy inside its own folder, never above it (a job writes only under --out); pages
    below a folder that already holds a copy (``identify --task all`` puts one in its --out first) link to that one."""
    from circuits.viz.page import asset_home, shared_asset

    fig = head_heatmap(torch.randn(3, 2), torch.randn(3))
    root = tmp_path / "identify"
    root.mkdir()
    shared_asset("plotly", root / "index.html", default=root)  # what identify --task all does
    with asset_home(root):  # ... while its job runs, for the pages below its --out
        for task in ("addition", "subtraction"):
            (root / task).mkdir(parents=True)
            (root / task / "config.json").write_text("{}")
            write_figure(fig, root / task / "heads.html")
    assets = list((root / ASSETS).iterdir())
    assert [a.name.split("-")[0] for a in assets] == ["plotly"]
    assert not any((root / task / ASSETS).exists() for task in ("addition", "subtraction"))
    page = (root / "addition" / "heads.html").read_text()
    assert f"src='../{ASSETS}/{assets[0].name}'" in page and len(page) < 100_000
    single = tmp_path / "single"
    single.mkdir()
    write_figure(fig, single / "heads.html")  # nothing above holds a copy: its own, inside its folder
    assert (single / ASSETS).is_dir() and not (tmp_path / ASSETS).exists()
    assert f"src='{ASSETS}/" in (single / "heads.html").read_text()
    alone = write_figure(fig, tmp_path / "alone.html", inline=True).read_text()
    assert len(alone) > 3_000_000 and f"{ASSETS}/" not in alone


def test_a_job_given_its_input_results_uses_their_copy_and_writes_none(tmp_path):
    """``make demo``'s method pages (knockout, lens) read identify's result: they load identify's plotly.js, checked
    byte for byte, instead of writing a second 4.8 MB copy; a tampered copy in the input is not used."""
    from circuits.viz.page import _asset, asset_home, shared_asset

    fig = head_heatmap(torch.randn(3, 2), torch.randn(3))
    ident, demo = tmp_path / "identify", tmp_path / "demo"
    ident.mkdir()
    shared_asset("plotly", ident / "index.html", default=ident)
    with asset_home(demo, inputs=[ident]):
        page = write_figure(fig, demo / "lens" / "figure.html").read_text()
    name = _asset("plotly")[0]
    assert not (demo / "lens" / ASSETS).exists() and not (demo / ASSETS).exists()
    assert f"src='../../identify/{ASSETS}/{name}'" in page
    (ident / ASSETS / name).write_text("tampered")
    with asset_home(demo, inputs=[ident]):
        write_figure(fig, demo / "lens2" / "figure.html")
    assert (demo / "lens2" / ASSETS / name).read_text() == _asset("plotly")[1]  # its own copy, not the tampered one


def test_report_shares_the_assets_beside_its_inputs(tmp_path):
    res = tmp_path / "results"
    write_identify(res / "identify", "addition")
    from circuits.viz.page import shared_asset

    shared_asset("plotly", res / "identify" / "index.html", default=res / "identify")  # as identify --task all does
    write_figure(head_heatmap(torch.randn(3, 2)), res / "identify" / "addition" / "heads.html")
    out = res / "report.html"
    from circuits.viz.report import write_report

    page = write_report([res / "identify"], out).read_text()
    plotly = next((res / "identify" / ASSETS).glob("plotly-*.js")).name
    assert f"src='identify/{ASSETS}/{plotly}'" in page and not (res / ASSETS).exists()
    assert len(page) < 1_000_000
    inline = write_report([res / "identify"], out, inline=True).read_text()
    assert "src='identify/" not in inline and len(inline) > 3_000_000
    # a page written elsewhere loads no input's copy from outside its own folder: it writes its own beside it
    away = tmp_path / "elsewhere" / "r.html"
    page = write_report([res / "identify"], away).read_text()
    assert f"src='{ASSETS}/{plotly}'" in page and (away.parent / ASSETS / plotly).is_file() and ".." not in page.split("src='")[1][:3]



def test_the_report_writes_plotlys_template_and_each_script_once(saved, tmp_path):
    """Every figure of the report refers to one copy of plotly's template (issue 44: 15 copies of its 6.5 KB in the
    demo's report); plotly.js and circuitsvis are each loaded once, never inlined beside it; the figures' layouts
    still carry the whole template once the page's script has run (the same object in every figure)."""
    from plotly.io.json import to_json_plotly

    from circuits.viz.report import write_report

    page = write_report([saved], tmp_path / "report.html").read_text()
    n_figures = page.count("Plotly.newPlot(")
    template = to_json_plotly(head_heatmap(torch.randn(2, 2)).to_dict()["layout"]["template"])
    assert n_figures >= 10 and page.count(template) == 1 and '"template":{' not in page.replace(template, "")
    assert page.count('"template":circuitsTemplates[0]') == n_figures
    assert page.index("var circuitsTemplates = [") < page.index("Plotly.newPlot(")
    assert page.count(" src='") == len(re.findall(r"<script type='text/javascript' src='[^']*(plotly|circuitsvis)-", page)) == 2
    inline = write_report([saved], tmp_path / "inline.html", inline=True).read_text()
    assert inline.count(template) == 1 and len(inline) - len(page) < 7_000_000  # each script inlined once


# --- notebook display: figures for results, short lines for everything ---------------------------------------------


def test_results_show_as_figures_and_pairs_as_short_tables(tokenizer, monkeypatch):
    import plotly.io as pio

    from circuits.data.pairs import PairSet, make_pair

    monkeypatch.setattr(pio.renderers, "default", "plotly_mimetype")  # what a notebook kernel picks
    from circuits.validate.knockout import KnockoutCurve

    pair = make_pair(tokenizer, "1 + 2 =\n3 + 4 =", "1 - 2 =\n3 - 4 =", "7")
    ps = PairSet([pair] * 40, 60, 0.75, 0.5, 0.1, 0.05, {}, True)
    assert len(repr(ps)) < 120 and "40 pairs" in repr(ps) and "75%" in repr(ps)
    page = ps._repr_html_()
    assert "… and 35 more" in page and page.count("<tr>") == 1 + 5 and "white-space:pre-wrap" in page
    curve = KnockoutCurve([0, 1], [(1, 2)], [1.0, 0.5], [0.9, 0.4], [[(0, 0)]], [[1.0, 0.9]], [[0.9, 0.8]])
    bundle = curve._repr_mimebundle_()
    assert "text/plain" in bundle and len(bundle["text/plain"]) < 120
    assert "application/vnd.plotly.v1+json" in bundle


def test_figures_name_a_local_model_by_its_folder_not_its_whole_path(tmp_path):
    """A model given as a folder or file path appears in titles and legends as its last part (a temporary folder's
    path once made every title three lines, over the subplot titles, and the cross-model legend wider than its
    plots); embedded and hub names appear as they are."""
    from circuits.viz.figures import cross_model_figure, model_label

    folder = tmp_path / "a" / "very" / "long" / "path" / "llama-sft"
    folder.mkdir(parents=True)
    assert model_label(str(folder)) == "llama-sft" and model_label(str(folder) + "/") == "llama-sft"
    assert model_label("~/models/x.gguf") == "x.gguf" and model_label("./ckpt") == "ckpt"
    assert model_label("smollm2") == "smollm2" and model_label("meta-llama/Llama-2-7b-hf") == "meta-llama/Llama-2-7b-hf"
    one = {"operations": {"addition": {"share_key_heads": 0.1}}, "knockout": {"ks": [0, 1], "effect_accuracy": [1, 0.5],
           "random_accuracy": [[1, 0.9]]}, "transfer": {}, "logit_lens": {"delta_C": [0.0, 1.0], "delta_other": [0.0, 0.5]}}
    fig = cross_model_figure({str(folder): one})
    assert {t.name for t in fig.data if t.showlegend is not False} == {"llama-sft"}


def test_heads_taken_by_rank_are_never_called_key_heads(saved):
    """Issue 40: "key heads" only for what the key rule selected; heads taken as an identify run's top k (transfer,
    knockout, attention) are "top k heads by <metric>", in the figures, the report's text and its tables."""
    from circuits.results import load_result

    transfer, knockout = load_result(saved / "transfer"), load_result(saved / "knockout")
    metric = KeyRule.parse(transfer.config.key_rule).metric
    names = [t.name for t in transfer.figure().data]
    assert f"top {len(transfer.key_heads)} heads by {metric} knocked out" in names
    assert not any("key heads" in (t.name or "") for t in (*transfer.figure().data, *knockout.figure().data))
    assert "top-k heads by" in knockout.figure().layout.title.text
    page = build_report([saved])
    for claim in ("key heads out", "key heads knocked out", "key heads (effect rank)", "attention patterns of the key",
                  "Where each key head", "Attention of key heads", "Key heads (Figures 7, 16)",
                  "Attention views of the key heads"):
        assert claim not in page, claim
    assert f"the top {len(transfer.key_heads)} heads by {metric} of the identify run" in page


def test_no_categorical_palette_uses_the_importance_red():
    """Roles (attention by role, the information flow's markers) and rankings (the faithfulness curves of each engine)
    are categories: none of their colours is the red every effect figure means "important" by (issue 40's colour
    rule), nor the red end of the diverging scale."""
    import plotly.colors

    from circuits.patching.engines.registry import ENGINES
    from circuits.viz.analysis_figures import ROLE_COLORS
    from circuits.viz.figures import ROLE_COLOURS

    def rgb(c: str) -> tuple[int, int, int]:
        c = {"red": "#ff0000"}.get(c, c)
        if c.startswith("rgb"):
            return tuple(int(float(x)) for x in c[c.index("(") + 1:-1].split(","))[:3]
        return tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))

    reds = [rgb(c) for c in ("#d62728", "red", plotly.colors.get_colorscale("RdBu")[0][1],
                             plotly.colors.get_colorscale("RdBu")[1][1])]
    palette = {**{f"role {k}": v for k, v in {**ROLE_COLOURS, **ROLE_COLORS}.items()},
               **{f"engine {k}": e.color for k, e in ENGINES.items()}}
    assert len(palette) > 8
    for what, colour in palette.items():
        r, g, b = rgb(colour)
        assert all(abs(r - x) + abs(g - y) + abs(b - z) > 120 for x, y, z in reds), f"{what} uses the importance red {colour}"


def test_every_section_lists_the_operations_in_the_heat_maps_order(saved, tmp_path):
    """Issue 40: knockout (and every other section) in the key-heads heat maps' order (addition, subtraction,
    multiplication, division), not in the folders' alphabetical order."""
    from circuits.validate.knockout import KnockoutResult

    ko = KnockoutResult.load(saved / "knockout")
    for folder, task in (("a-division", "division"), ("b-subtraction", "subtraction"), ("c-addition", "addition")):
        ko.task = task
        ko.save(tmp_path / folder)
        write_identify(tmp_path / folder / "id", task)
    page = build_report([tmp_path])
    knockout = page.split("Knockout curves (validate)", 1)[1]
    at = [knockout.index(f"{task} pairs (Figure 3)") for task in ("addition", "subtraction", "division")]
    assert at == sorted(at), at


def test_every_page_keeps_the_scrollbar_s_room_from_the_start(tmp_path):
    """A figure page, the report and an attention page reserve the vertical scrollbar's room before anything is drawn,
    and figure pages resize with the window: plotly sizes an autosized figure when its script runs, and a scrollbar
    appearing later pushed the faithfulness page's first figures past the window (tests/integration/
    test_report_browser.py opens such a page in Chromium, scrollbars shown, at 1000, 1280 and 1600 px)."""
    from circuits.viz.page import CSS, GUTTER_CSS

    assert "scrollbar-gutter:stable" in GUTTER_CSS and CSS.startswith(GUTTER_CSS)  # the report's and attention pages'
    fig = head_heatmap(torch.zeros(2, 2), torch.zeros(2))
    page = write_figure(fig, tmp_path / "figure.html").read_text()
    assert f"<style>{GUTTER_CSS}" in page and '"responsive": true' in page
    write_identify(tmp_path / "results")
    assert f"<style>{GUTTER_CSS}" in build_report([tmp_path / "results"])
