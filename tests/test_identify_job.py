import json

import pytest

from circuits.cli import main as cli_main
from circuits.identify_job import IdentifyConfig, run_identify
from circuits.results import read_json


def test_bad_inputs_are_one_clear_error(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli_main(["identify", "--key-rule", "fastest", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Cannot read key rule 'fastest'" in err and "Accepted" in err
    assert not out.exists()  # nothing half-written
    assert cli_main(["identify", "--model", "no-such-model", "--out", str(out)]) == 2
    assert "Cannot load model 'no-such-model'" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(SystemExit):
        cli_main(["identify", "--task", "modulo", "--out", str(out)])


def test_config_validation():
    with pytest.raises(ValueError, match="Unknown mode"):
        IdentifyConfig(mode="causal")
    with pytest.raises(ValueError, match="n_pairs"):
        IdentifyConfig(n_pairs=0)


@pytest.mark.slow
def test_identify_writes_results_atomically_and_resumes(smollm2, tmp_path, capsys):
    out = tmp_path / "identify"
    config = IdentifyConfig(task="addition", n_pairs=3, key_rule="top4")
    folders = run_identify(config, out, model=smollm2, progress=False)
    assert folders == {"addition": out}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["identify"]  # no temp folders left
    s = read_json(out / "summary.json")
    for key in ("model", "task", "mode", "n_pairs", "accuracy", "mean_answer_prob", "head_effects", "mlp_effects",
                "key_rule", "key_heads", "key_mlps", "fraction_key_heads", "seconds", "metrics"):
        assert key in s
    assert len(s["head_effects"]) == 30 and len(s["head_effects"][0]) == 9 and len(s["mlp_effects"]) == 30
    assert len(s["key_heads"]) == 4 and s["key_rule"]["rule"] == "top4:fraction"
    fractions = s["metrics"]["fraction"]["head_effects"]
    assert [fractions[l][h] for l, h, _ in s["key_heads"]] == sorted((e for _, _, e in s["key_heads"]), reverse=True)
    assert set(s["metrics"]) == {"relative_logit", "fraction", "logit_diff", "prob"}
    pairs = [json.loads(line) for line in open(out / "pairs.jsonl")]
    assert len(pairs) == 3
    for p in pairs:
        assert smollm2.tokenizer.decode(p["reference_token_ids"]) == p["reference"]
        assert len(p["reference_token_ids"]) == len(p["counterfactual_token_ids"])
    html = (out / "heads.html").read_text()
    assert "plotly" in html and '<script src="http' not in html  # plotly.js embedded, no CDN
    # A second run with the same config resumes instead of recomputing.
    before = (out / "summary.json").stat().st_mtime_ns
    capsys.readouterr()
    run_identify(config, out, model=smollm2, progress=False)
    assert "resumed" in capsys.readouterr().out
    assert (out / "summary.json").stat().st_mtime_ns == before
