"""Issue 40 on whichever backend this virtualenv has (TransformerLens 3.9's HookedTransformer in ``.venv``, 4.3's
TransformerBridge in ``.venv-tl4``), on the tiny random Llama: a run from a pairs file records no default the file
replaced and names the file and its SHA-256 (tests/unit/test_pairs_file_provenance.py runs every job that takes one),
and the Python entries refuse pairs the model never answers as their jobs do unless ``force=True``
(tests/unit/test_job_validity.py runs every entry)."""

from __future__ import annotations

import hashlib
import json

import pytest
from helpers import tiny_dir

from circuits.cli import main as cli_main
from circuits.data.pair_config import PAIRS_FILE_REPLACES
from circuits.identify.validity import FORCE_ENV, Untrusted, ValidityWarning
from circuits.results import load_result

PAIRS = [{"prompt": f"{a} + {b} = ", "counterfactual": f"{a} @ {b} = ", "answer": str(a + b)}
         for a, b in ((3, 4), (2, 5), (1, 1))]


def test_a_pairs_file_run_records_what_it_read_and_no_default_it_replaced(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    model = str(tiny_dir("llama"))
    runs = {"identify": (["identify", "--model", model, "--pairs-file", str(path), "--bootstrap", "5"], ("seed",)),
            "faithfulness": (["faithfulness", "--model", model, "--pairs-file", str(path), "--rankings", "exact-path",
                              "--sizes", "0.5", "--second-logit", "top", "--no-held-out"], ())}
    for name, (argv, kept) in runs.items():
        out = tmp_path / name
        assert cli_main([*argv, "--no-filter-correct", "--force", "--no-progress", "--out", str(out)]) == 0
        saved = json.loads((out / "config.json").read_text())
        assert [n for n in PAIRS_FILE_REPLACES if saved[n] is not None] == list(kept), (name, saved)
        r = load_result(out)
        assert type(r.config).from_json(saved) == r.config and r.config_json() == saved
        summary = json.loads((out / "summary.json").read_text())
        assert summary["pairs_file"]["sha256"] == digest and r.provenance["pairs_file"]["sha256"] == digest
    ko = tmp_path / "knockout"
    assert cli_main(["knockout", "--heads-from", str(tmp_path / "identify"), "--pairs-file", str(path), "--ks", "0,1",
                     "--seeds", "0", "--no-progress", "--out", str(ko)]) == 0
    saved = json.loads((ko / "config.json").read_text())
    assert [n for n in PAIRS_FILE_REPLACES if saved[n] is not None] == ["seed"]
    assert load_result(ko).provenance["pairs_file"]["sha256"] == digest


@pytest.mark.parametrize("entry", ["identify", "faithfulness"])
def test_a_python_entry_refuses_as_its_job_unless_forced(entry, monkeypatch):
    from circuits.data.pairs import make_pair
    from circuits.models import load_model

    monkeypatch.delenv(FORCE_ENV, raising=False)
    model = load_model(tiny_dir("llama"), device="cpu").requires_grad_(False)
    pairs = [make_pair(model.tokenizer, p["prompt"], p["counterfactual"], p["answer"]) for p in PAIRS]
    if entry == "identify":
        from circuits.identify.config import IdentifyConfig
        from circuits.identify.job import identify

        def call(**kw):
            return identify(model, pairs, IdentifyConfig(model="tiny", bootstrap=0), progress=False, **kw)
    else:
        from circuits.beyond.faithfulness.config import FaithfulnessConfig
        from circuits.beyond.faithfulness.job import faithfulness

        def call(**kw):
            return faithfulness(model, pairs, FaithfulnessConfig(model="tiny", rankings=("exact-path",), sizes=(0.5,),
                                                                 positions=("end",), n_boot=0, held_out=False),
                                progress=False, **kw)
    with pytest.raises(Untrusted, match=f"^{entry} refused, this result cannot be trusted: the model answers 0%"):
        call()
    with pytest.warns(ValidityWarning, match="refused without force"):
        v = call(force=True).validity()
    assert v.forced and v.accuracy == 0.0 and v.refusals
