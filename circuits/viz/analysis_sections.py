"""Report sections beyond heads at END: the audited attribution screen, every position, neurons, edges, and how
sure the ranking is. Each renderer takes the page and the :class:`~circuits.viz.sections.Found` results of its kinds
and returns HTML (a sentence saying what it shows, the figure, the config), as the other sections do."""

from __future__ import annotations

from typing import Any

from circuits.results import result_type
from circuits.viz.page import Page, _e, _pct, table, validity_banner


def _f(x: Any, digits: int = 3) -> str:
    return "-" if x is None or x != x else f"{x:+.{digits}f}" if isinstance(x, float) else str(x)


def _screen_text(r: Any) -> str:
    s = r.summary()
    sec = r.seconds
    out = [f"<h3>{_e(s.get('task', ''))}</h3><p class='what'>Attribution patching ({_e(r.mode)} mode, metric "
           f"{_e(r.metric)}) estimated every head, MLP and neuron at every position of {len(r.pairs)} pairs in "
           f"{sec.get('screen', 0):.0f} s; its top nodes were re-measured exactly (END engine at END, the "
           f"per-position engine elsewhere).</p>"]
    out.insert(1, validity_banner(r.validity()))
    if r.audit:
        a = r.audit
        out.append(f"<p>Against the exact END engine over all {_e(a.get('n_components'))} heads and MLPs: Spearman "
                   f"<b>{a['spearman_end']:.3f}</b> (heads {a.get('spearman_end_heads', float('nan')):.3f}, MLPs "
                   f"{a.get('spearman_end_mlps', float('nan')):.3f}).</p>")
        ns = sorted(int(k.rsplit("_", 1)[1]) for k in a if k.startswith("exact_top10_missed_at_"))
        out.append(table(["screen's top-N", *map(str, ns)],
                         [["exact top-10 missed", *[a[f"exact_top10_missed_at_{n}"] for n in ns]],
                          [f"exact top-5% ({a.get('top5pct_size')}) missed", *[a[f"exact_top5pct_missed_at_{n}"] for n in ns]]]))
        if a.get("largest_misses"):
            out.append("<p>Largest misses (exact top-10 outside the screen's top-20, else the largest errors):</p>")
            out.append(table(["component", "exact", "screen", "exact rank", "screen rank", "why"],
                             [[m["component"], _f(m["exact"]), _f(m["screen"]), m["exact_rank"], m["screen_rank"],
                               m.get("why", m.get("note", ""))] for m in a["largest_misses"]]))
    if r.verified:
        out.append("<p>Verified nodes (offset 0 is END):</p>" + table(
            ["node", "kind", "screen", "exact"], [[v["node"], v["kind"], _f(v["screen"]), _f(v["exact"])] for v in r.verified[:20]]))
    return "".join(out)


def positions_section(page: Page, found: list) -> str:
    return page.per_result(found, lambda r: validity_banner(r.validity()) + (
        f"<p class='what'>Activation patching of every head and MLP at every position ({len(r.pairs)} pairs, "
        f"exact: only positions from the patch to END recompute, from a cached prefix; {r.seconds:.0f} s), as "
        f"Stolfo et al.'s information flow: which layers at which positions carry the operands and operator "
        f"to the answer. {_columns_text(r)}</p>"))


def _columns_text(r: Any) -> str:
    """What the flow figure's columns are (:mod:`circuits.beyond.positions.align`)."""
    al = r.alignment()
    if al is None:
        return ("No roles given: the columns are positions counted back from END, labelled with one prompt, and no "
                "operand or operator is marked.")
    if al.by_role:
        return (f"The pairs come from {len({p.template_id for p in r.pairs})} templates, so the columns are token "
                "roles (A, operator, B, equals, END, and offsets from the nearest of them), each pair read at its own "
                "offset; dotted lines mark the role columns.")
    return ("Every pair has the same token layout, so the columns are one prompt's positions, token for token; dotted "
            "lines mark its operand (A, B), operator and '=' positions.")


def _neurons_text(r: Any) -> str:
    rows = [[f"MLP{l}", _pct(s["share_for_50pct"], 1), _pct(s["share_for_80pct"], 1), _pct(s["top1pct_of_total"]),
             _f(s["sum_of_neuron_effects"]), _f(s["whole_mlp_effect"])] for l, s in r.shares().items()]
    out = [validity_banner(r.validity()), f"<p class='what'>Every neuron of the MLPs below patched alone at END ({_e(r.sweep.mode)} patching, "
           f"{_e(r.metric)}), as Nikankin et al. ask: what share of a layer's neurons carries most of its "
           f"effect, and does knocking out only those neurons do what knocking out the whole MLP does?</p>",
           table(["MLP", "neurons for 50%", "neurons for 80%", "top 1% carry", "sum of neuron effects",
                  "whole MLP effect"], rows)]
    k = r.knockout
    if k:
        out.append(table(["knocked out", "accuracy"],
                         [["nothing", _pct(k["none_accuracy"], 1)], ["whole MLPs", _pct(k["whole_accuracy"], 1)]]
                         + [[f"top {100 * s:g}% of neurons ({n})", f"{_pct(a, 1)} (random: {_pct(ra, 1)})"]
                            for s, n, a, ra in zip(k["shares"], k["n_neurons"], k["top_accuracy"], k["random_accuracy"])]))
    return "".join(out)


def heuristics_section(page: Page, found: list) -> str:
    """Heuristic neurons: what was classified, the rule table, the grid heat maps and the class knockout."""
    out = []
    for f in found:
        r = f.result
        s = r.summary()
        counts = ", ".join(f"{k} {v}" for k, v in s["class_counts"].items())
        out.append(validity_banner(r.validity()))
        out.append(f"<p class='what'>The top {r.config.neurons_per_mlp} neurons of MLPs "
                   f"{', '.join(map(str, s['layers']))} (by their exact END effect, {_e(r.metric)}) read over the "
                   f"operand grid ({s['n_grid_prompts']} prompts, {_e(r.config.task)}, operands "
                   f"{r.config.operands[0]}..{r.config.operands[1]}) and each fitted to the heuristic classes of "
                   f"Nikankin et al. (an operand or the result in a range or residue class, a pattern, the answer's "
                   f"identity): a rule counts when its chance-corrected top-k match reaches {r.config.threshold} and "
                   f"is unlikely by chance. <b>{s['n_classified']} of {s['n_neurons']}</b> neurons are classified "
                   f"({_e(counts)}); they carry <b>{_pct(s['share_carried'])}</b> of the top neurons' effect.</p>")
        rates = s.get("classified_rates", {})
        if len(rates) > 1:  # the null of "classified" (issue 43): the same test on neurons not chosen for their effect
            names = {"top": "the top neurons", "random": "as many random neurons of the same MLPs",
                     "low_effect": "the MLPs' lowest-effect neurons"}
            out.append("<p>The same test on neurons not chosen for their effect (the null; 95% Wilson intervals, "
                       "Fisher's exact test against the top neurons): " + "; ".join(
                           f"{names.get(g, _e(g))} {v['n_classified']} of {v['n']} ({_pct(v['rate'])} "
                           f"[{_pct(v['low'])}, {_pct(v['high'])}]" + (f", p = {v['p_vs_top']:.2g}" if "p_vs_top" in v
                                                                      else "") + ")"
                           for g, v in rates.items()) + ".</p>")
        rows = [[x["neuron"], _f(x["effect"]), ", ".join(x["classes"]), x["rule"] or "-", f"{x['score']:.2f}",
                 {1: "highest", -1: "lowest", 0: "-"}[x["polarity"]],
                 "-" if x["promotion"] is None else f"{x['promotion']:+.2f}"] for x in r.table_rows()]
        out.append(f"<p>The {min(30, len(rows))} largest END effects of the {len(rows)} neurons; match: the primary rule's "
                   "chance-corrected top-k match; promotes: how much the neuron's output (W_out @ W_U) favours the "
                   "answers of the cells its rule covers, in standard deviations (positive: it promotes them).</p>")
        out.append(table(["neuron", "END effect", "classes", "rule (primary)", "match", "activation where the rule holds",
                          "promotes its answers (z)"], rows[:30]))
        out.append(page.figure(r.figure(), getattr(f, "label", "")))
        k = s["knockout"]
        if k:
            acc = r.knockout.get("clean_accuracy")
            out.append(f"<p>Class knockout (mean hook_post over the grid). Metric: the {_e(r.knockout['metric'])}, per "
                       f"prompt; a class is the neurons sharing one rule, its covered prompts those its rule holds on; "
                       f"random: as many neurons of the same MLPs, {r.knockout['n_random']} draws. Accuracy on the "
                       f"grid before knockout (first answer token): {_pct(acc, 1) if acc is not None else '-'}.</p>")
            def vs(c: dict) -> str:  # the class minus random on the covered prompts, Holm over the classes
                v = c["covered_vs_random"]
                return (f"{_f(v['mean'], 4)} [{_f(v['low'], 4)}, {_f(v['high'], 4)}] at {100 * v['level']:.2f}%: "
                        + ("apart" if v["holm_apart"] else "not apart"))

            out.append(table(["class", "neurons", "covered drop [95%]", "uncovered drop [95%]", "random, covered",
                              "random, uncovered", f"covered, class minus random (Holm over {len(k)})"],
                             [[n, c["n_neurons"], *[f"{_f(c[x]['mean'], 4)} [{_f(c[x]['low'], 4)}, {_f(c[x]['high'], 4)}]"
                                                     f" (n={c[x]['n']})" for x in ("covered_drop", "uncovered_drop",
                                                                                   "random_covered_drop",
                                                                                   "random_uncovered_drop")], vs(c)]
                              for n, c in k.items()]))
            out.append(page.figure(r.knockout_figure(), getattr(f, "label", "")))
        pk = s.get("prompt_knockout", {})
        if pk:  # Nikankin et al.'s per-prompt knockout read on accuracy (issue 43)
            raw = r.prompt_knockout
            n = next(iter(pk.values()))["n_prompts"]
            out.append(f"<p>Per-prompt knockout (Nikankin et al., Section 4.2): for each of the {n} grid prompts "
                       f"{'(all of them)' if raw['prompts'] == 'all' else 'the model answers correctly'}, the neurons whose heuristics hold on its operands and result (most of them "
                       f"first) knocked out, up to a limit per MLP ({_e(raw['ablation'])} hook_post at every "
                       f"position); random: as many of the MLP's {'top ' if raw['control'] == 'top' else ''}neurons "
                       f"the prompt is not associated with, {raw['n_random']} draws per prompt. Accuracy: the top "
                       f"token at END is the answer's. 95% bootstrap intervals over prompts; the difference is paired, "
                       f"Holm over the {len(pk)} limits.</p>")

            def acc(x: dict) -> str:
                return f"{x['mean']:.3f} [{x['low']:.3f}, {x['high']:.3f}]"

            out.append(table(["neurons per MLP (up to)", "knocked out per prompt", "accuracy before",
                              "associated knocked out", "random knocked out", "associated minus random"],
                             [[k, f"{v['mean_ablated']:.1f}", acc(v["before"]), acc(v["associated"]), acc(v["random"]),
                               f"{v['difference']['mean']:+.3f} [{v['difference']['low']:+.3f}, "
                               f"{v['difference']['high']:+.3f}]: "
                               + ("apart" if v["difference"]["holm_apart"] else "not apart")] for k, v in pk.items()]))
            out.append(page.figure(r.prompt_knockout_figure(), getattr(f, "label", "")))
        out.append(f.config_html())
    return "".join(out)


def edges_section(page: Page, found: list) -> str:
    edge_result = result_type("edges")  # by kind: viz imports no step module

    out = []
    for f in found:
        r = edge_result.of_identify(f.result) if f.kind == "identify" else f.result  # type: ignore[attr-defined]
        if r is None:
            continue
        edges, metric = r.edges, r.metric
        fig = r.figure(f"{f.result.task}: senders -> receivers -> logits" if f.kind == "identify" else None)
        out.append(f"<p class='what'>Path patching from every earlier component into each receiver at END (the "
                   f"receiver's query, key or value input, or an MLP's input), every other head frozen, as in the "
                   f"original path-patching algorithm; {len(edges.senders)} senders x {len(edges.receivers)} receivers "
                   f"({_e(metric)}).</p>")
        scores = edges.scores(metric)
        top = {str(rc): scores.ranked(5, into=rc) for rc in edges.receivers}
        out.append(table(["receiver", "strongest senders"], [[k, ", ".join(f"{s} ({v:+.3f})" for s, v in vs)] for k, vs in top.items()]))
        out.append(page.figure(fig) + f.config_html())
    return "".join(out)  # empty: no identify result here was made with --receivers (listed as not run)


def uncertainty_section(page: Page, found: list) -> str:
    out = []
    ids = [f for f in found if f.kind == "identify" and f.result.sweep is not None]
    rows = []
    for f in ids:
        r = f.result
        ci = r.intervals()
        if ci is None:
            continue
        hs, ms = r.uncertain()
        rows.append([r.task or f.path.name, len(r.key_heads()), ", ".join(map(str, hs)) or "none",
                     ", ".join(f"MLP{m}" for m in ms) or "none", f"{ci.level:.0%}, {ci.n_boot} resamples"])
    if rows:
        out.append("<p class='what'>Bootstrap confidence intervals over prompt pairs for every effect (hover a cell of "
                   "a heatmap above). Key components whose interval crosses the key rule's threshold could go either way "
                   "with other pairs: they are marked uncertain (dashed boxes).</p>")
        out.append(table(["task", "key heads", "uncertain key heads", "uncertain key MLPs", "interval"], rows))
    for f in (f for f in found if f.kind == "stability"):
        s = f.result.summary()["per_operation"]
        out.append("<h3>Stability of the key-head set</h3><p class='what'>Jaccard overlap |A&cap;B|/|A&cup;B| of the key "
                   "heads found with different seeds (new operands, templates and words) and on each template form alone.</p>")
        out.append(table(["operation", "mean Jaccard across seeds", "mean Jaccard across forms", "forms"],
                         [[op, f"{v['mean_jaccard_seeds']:.2f}", f"{v['mean_jaccard_forms']:.2f}", ", ".join(v["forms"])]
                          for op, v in s.items()]))
        out.append(page.figure(f.result.figure()) + f.config_html())
    for f in (f for f in found if f.kind == "ablation_kinds"):
        r = f.result
        out.append("<h3>Ablation kinds</h3><p class='what'>Figure 3 with the knocked-out heads replaced by their mean over "
                   "counterfactual prompts (the paper's), by zero, or by another prompt's counterfactual value "
                   "(resample): how much of the conclusion depends on the choice.</p>")
        summ = r.summary()
        out.append(table(["task", "ablation", "k", "accuracy, none", "top-k heads out", "random heads out"],
                         [[t, kind, v["k"], _pct(v["accuracy_none"], 1), _pct(v["accuracy_key_heads"], 1),
                           _pct(v["accuracy_random_heads"], 1)] for t, by in summ.items() for kind, v in by.items()]))
        for task in r.curves:
            out.append(page.figure(r.figure(task)))
        out.append(f.config_html())
    return "".join(out)  # empty: no intervals, stability or ablation kinds (listed as not run)


def faithfulness_section(page: Page, found: list) -> str:
    return page.per_result(found, lambda r: validity_banner(r.validity()) + _faithfulness_text(r),
                           lambda r: [r.figure(setting) for setting in r.settings])


def _faithfulness_text(r: Any) -> str:
    c = r.config
    sizes = ", ".join(f"{100 * s:g}%" for s in c.sizes)
    out = [f"<h3>{_e(r.task)}</h3><p class='what'>The circuit of each ranking at {sizes} of the nodes (or edges) "
           f"kept, everything else ablated ({_e(c.ablation)}), scored as MIB scores circuit discovery: faithfulness "
           f"f = (m(C) - m(empty)) / (m(N) - m(empty)) with m the {_e(c.metric)} over "
           + (f"{len(r.scoring_pairs)} pairs held out from the {len(r.pairs)} each ranking was found on"
              if getattr(r, "held_out", False) else f"{len(r.pairs)} pairs (the ones each ranking was found on)")
           + f"; CPR is the area under f (higher is better), read from the "
           f"{_e(getattr(c, 'cpr_ranking', 'absolute'))} ranking's curve, CMD the area between f and 1 (lower is "
           f"better), read from the absolute ranking's curve, with bootstrap intervals over pairs. Seconds: computing the ranking, then measuring its curve (wall-clock, and this "
           f"process's CPU time in brackets).</p>"]

    def ci(v: Any) -> str:
        return f" [{v[0]:.3f}, {v[1]:.3f}]" if v else ""

    rows = [[row["ranking"], row["setting"], f"{row['cpr']:.3f}{ci(row['cpr_ci'])}",
             f"{row['cmd']:.3f}{ci(row['cmd_ci'])}", f"{row['ranking_seconds']:.1f} ({row['ranking_cpu_seconds']:.1f})",
             f"{row['curve_seconds']:.1f} ({row['curve_cpu_seconds']:.1f})"] for row in r.table()]
    out.append(table(["ranking", "circuit", "CPR (higher better)", "CMD (lower better)", "ranking s (CPU s)",
                      "curve s (CPU s)"], rows))
    best = [(s, r.best(s)) for s in r.settings]
    found = [f"{_e(s)}: <b>{_e(b[0])}</b> ({b[1]:.3f})" for s, b in best if b]
    out.append("<p>Lowest CMD: " + "; ".join(found) + ".</p>" if found else
               "<p>f is undefined on these pairs: m(N) = m(empty) on every pair.</p>")
    return "".join(out)


def numbers_section(page: Page, found: list) -> str:
    return page.per_result(found, _numbers_text, lambda r: [r.figure(), r.digit_figure()])


def _numbers_text(r: Any) -> str:
    s = r.summary()
    periods = [f"{p:g}" for p in s["periods"]]
    out = [f"<h3>{_e(s['task'])}</h3><p class='what'>Each key head's and MLP's direct effect at END on the logit of "
           f"every single-token number (0..{len(s['numbers']) - 1}: this tokenizer writes numbers digit by digit), "
           f"over {s['n_pairs']} pairs, and the discrete Fourier transform of it over the number line, as Zhou et al. "
           f"(2024) read MLP and attention outputs: the share of the energy at each period (the mean over the numbers "
           f"left out). Zhou et al. find MLPs carrying the low frequencies (long periods) and attention the high ones "
           f"(periods 2, 5).</p>"]
    ci = s.get("by_kind_ci", {})
    comp = s.get("by_kind_component_ci", {})

    def cell(k: str, p: str) -> str:
        lo_hi, over = ci.get(k, {}).get(p), comp.get(k, {}).get(p)
        return (_pct(s["by_kind"][k][p]) + (f" [{_pct(lo_hi[0])}, {_pct(lo_hi[1])}]" if lo_hi else "")
                + (f"; [{_pct(over[0])}, {_pct(over[1])}]" if over else ""))

    rows = [[("heads" if k == "head" else "MLPs"), *[cell(k, p) for p in periods]] for k in s["by_kind"]]
    for key, label in (("chance_shares", "white noise (chance)"), ("trend_shares", "a straight trend")):
        if key in s:  # the nulls on the same number line (issue 43)
            rows.append([label, *[_pct(s[key][p], 1) for p in periods]])
    out.append(table(["mean share over the key", *[f"period {float(p):.3g}" for p in periods]], rows))
    out.append("<p>Brackets: 95% bootstrap intervals over pairs, then (after the semicolon) over the components "
               "(the heads, or the MLPs, resampled): a claim about the heads or the MLPs generalises across those. "
               "A share means something against the white-noise row (each period's share of noise on the same "
               "points, not one over the number of periods) and the straight-trend row. On a line of ten numbers the longest period also takes "
               "a straight trend (magnitude): the share of each component's energy a straight line explains is "
               + ", ".join(f"{_e(c)} {_pct(v['ramp_share'])}" for c, v in s["components"].items()) + ". The share of "
               "all its energy that lifts every number alike (the mean, left out above): "
               + ", ".join(f"{_e(c)} {_pct(v['mean_share'])}" for c, v in s["components"].items()) + ".</p>")
    out.append("<p>Dominant periods (fewest carrying half the energy): " + "; ".join(
        f"{_e(c)}: {', '.join(f'{p:.3g}' for p in ps)}" for c, ps in s["dominant_periods"].items()) + ".</p>")
    if "two_digit_accuracy" in s:
        out.append(f"<p>Two-digit addition (A + B = with a two-digit sum, the task's few-shot prefix, greedy decoding "
                   f"of the answer's two tokens): <b>{_pct(s['two_digit_accuracy'], 1)}</b> of {s['n_problems']} "
                   f"right.</p>")
    if s.get("neurons"):
        out.append("<p class='what'>The key MLPs' top neurons (by exact END effect), each patched alone from a "
                   "prompt with one operand digit changed (Baeumel et al. 2025): units when changing the operands' "
                   "units digit moves the answer's units logit at least twice as much as changing their tens digit "
                   "moves its tens logit, tens the reverse, both otherwise, none when under a tenth of the strongest "
                   "neuron's effect. Counts: " + ", ".join(f"{lab} {n}" for lab, n in s["label_counts"].items())
                   + ".</p>")
    if s.get("note"):
        out.append(f"<p>Digit positions: {_e(s['note'])}.</p>")
    return "".join(out)


def carry_section(page: Page, found: list) -> str:
    """The carry study (issue 42): each measurement beside its null, as a table (no figure)."""
    return page.per_result(found, lambda r: validity_banner(r.validity()) + "<p class='what'>Single-digit sums with a "
        "two-digit answer, read at END (the carry \"1\") and at END + 1 (the units digit, the \"1\" teacher-forced): do "
        "the two tokens have components of their own? Each row beside its null; intervals are 95% bootstrap (over pairs) "
        "or Wilson (over prompts).</p>" + table(["measurement", "value [interval]", "null"], r.table_rows()), lambda r: ())
