"""``circuits mib`` (issue 40): an identify or edges result's scores written as MIB's graph file, the model's sizes read
from its config (equal to the loaded model's), read back by ``mib.read`` to the same scores; bad input is one line
before anything is written."""

import pytest
import torch
from helpers import tiny_dir

from circuits.cli import main as cli_main
from circuits.models.loading import load_model, model_sizes
from circuits.patching.interchange import mib
from circuits.results import load_result
from circuits.types import eap_receivers, eap_senders, edge_mask


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("mib")
    model = str(tiny_dir("llama"))
    flags = ["--model", model, "--no-filter-correct", "--few-shot", "on", "--pairs", "3", "--bootstrap", "0", "--force"]
    assert cli_main(["identify", *flags, "--receivers", "2.1,MLP1", "--out", str(root / "id")]) == 0
    assert cli_main(["edges", "--heads-from", str(root / "id"), "--receivers", "2.0.v,MLP2", "--no-progress",
                     "--out", str(root / "edges")]) == 0
    return root, model


def cells(result, metric):
    """Each measured edge's importance at its (sender, receiver) index of EAP-IG's graph, by hand."""
    sweep = result.edges
    s_all, r_all = eap_senders(3, 4), eap_receivers(3, 4)
    eff = sweep.scores(metric)["edges"]
    sign = sweep.metric(metric).sign
    return {(s_all.index(s), r_all.index(r)): sign * float(eff[i, j])
            for i, s in enumerate(sweep.senders) for j, r in enumerate(sweep.receivers) if eff[i, j] == eff[i, j]}


def test_model_sizes_are_the_loaded_models(made):
    _, model = made
    cfg = load_model(model).cfg
    assert model_sizes(model) == {"n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "d_model": cfg.d_model}


@pytest.mark.parametrize("kind", ["id", "edges"])
def test_circuits_mib_writes_what_mib_read_reads_back(made, kind, capsys):
    root, model = made
    out = root / f"{kind}.json"
    assert cli_main(["mib", str(root / kind), "--out", str(out)]) == 0
    assert "d_model=64" in capsys.readouterr().out
    result = load_result(root / kind)
    metric = result.key_rule.metric if kind == "id" else result.metric
    g = mib.read(out)
    cfg = load_model(model).cfg
    assert g.cfg == {"n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "parallel_attn_mlp": False,
                     "d_model": cfg.d_model}
    if kind == "id":  # node scores: every head's and MLP's importance, exactly
        s = result.scores(metric)
        torch.testing.assert_close(g.node_scores[1:].reshape(3, 5)[:, :4], s.importance("heads").float(), rtol=0, atol=0)
        torch.testing.assert_close(g.node_scores[1:].reshape(3, 5)[:, 4], s.importance("mlps").float(), rtol=0, atol=0)
    else:
        assert g.node_scores is None
    want = cells(result, metric)
    assert want and not g.edges_in_graph.any()
    real = edge_mask(3, 4)
    for (i, j), v in want.items():
        assert real[i, j] and float(g.edge_scores[i, j]) == pytest.approx(v, rel=1e-6, abs=1e-7)
    measured = {tuple(ij) for ij in (~g.edge_scores.isnan()).nonzero().tolist()}
    assert measured == set(want)  # every other edge unmeasured (NaN), none written as a 0

    top = root / f"{kind}-top.json"
    assert cli_main(["mib", str(root / kind), "--out", str(top), "--top", "2"]) == 0
    marked = mib.read(top).edges_in_graph
    assert int(marked.sum()) == 2
    best = sorted(want.items(), key=lambda kv: -kv[1])[:2]
    assert {ij for ij, _ in best} == {tuple(ij) for ij in marked.nonzero().tolist()}


@pytest.mark.parametrize("argv,says", [
    (["--out", "{root}/x.txt"], "MIB's graph is a .json file"),
    (["--out", "{root}/id.json"], "exists; pass --overwrite"),
    (["--out", "{root}/id.json", "--overwrite"], "is not a MIB graph file"),  # the user's own file: kept
    (["--out", "{root}/y.json", "--metric", "nope"], "--metric 'nope': accepted"),
    (["--out", "{root}/y.json", "--top", "2.5"], "--top 2.5: a count"),
])
def test_bad_input_is_one_line_and_nothing_written(made, argv, says, capsys):
    root, _ = made
    (root / "id.json").write_text("{}")
    before = set(root.iterdir())
    assert cli_main(["mib", str(root / "id"), *[a.format(root=root) for a in argv]]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err
    assert set(root.iterdir()) == before


def test_scores_of_another_model_are_refused(made):
    root, _ = made
    result = load_result(root / "id")
    nodes_only = mib.graph_of(3, 4, 64, nodes=result.scores("fraction"), top=3)
    assert nodes_only.edge_scores.isnan().all() and int(nodes_only.nodes_in_graph[1:].sum()) == 3
    with pytest.raises(ValueError, match="measured on another model"):
        mib.graph_of(4, 4, 64, nodes=result.scores("fraction"))
    with pytest.raises(ValueError, match="measured on another model"):
        mib.graph_of(2, 4, 64, edges=result.edges.scores("fraction"))


def test_overwrite_replaces_a_graph_file_it_wrote(made):
    root, _ = made
    out = root / "again.json"
    assert cli_main(["mib", str(root / "id"), "--out", str(out)]) == 0
    assert cli_main(["mib", str(root / "id"), "--out", str(out), "--top", "2", "--overwrite"]) == 0
    assert int(mib.read(out).edges_in_graph.sum()) == 2  # the second run's graph, not the first's
