"""Identify's sweep reads the END activations filtering already computed (issue 44's "reuse identify's runs"):
filtering runs every candidate's reference prompt, and the sweep needs the kept ones' END activations at every layer.
With an :class:`~circuits.models.forward.EndRecord` the sweep runs only the counterfactual prompts (and any reference
prompt the record lacks); its numbers equal the sweep that runs both, up to float rounding (the two passes share
prefixes differently), and so the plain ``run_with_hooks`` loop's."""

from __future__ import annotations

import pytest
import torch

SWEPT = ("head_logit", "head_logit_diff", "head_prob", "mlp_logit", "mlp_logit_diff", "mlp_prob")


@pytest.fixture(scope="module")
def filtered(tiny_llama):
    from circuits.data.pairs import PairConfig, build_pairs
    from circuits.models.forward import EndRecord
    from circuits.patching.core.end_layers import reference_end_names

    record = EndRecord(reference_end_names(tiny_llama), 2**30)
    config = PairConfig(task="addition", n_pairs=6, filter_correct=False, max_candidates=40)
    pairs = build_pairs(tiny_llama, config, check_counterfactual=False, progress=False, record=record).pairs
    return pairs, record


def counted(monkeypatch) -> list[int]:
    """The number of rows each END forward of collect_runs runs."""
    from circuits.patching.core import end_layers

    ran: list[int] = []
    real = end_layers.end_residuals

    def spy(model, rows, *args, **kwargs):
        ran.append(len(rows))
        return real(model, rows, *args, **kwargs)

    monkeypatch.setattr(end_layers, "end_residuals", spy)
    return ran


def test_the_record_keeps_the_kept_pairs_only(filtered, tiny_llama):
    from circuits.patching.core.end_layers import reference_end_names

    pairs, record = filtered
    assert set(record.rows) == {tuple(p.reference_token_ids) for p in pairs}
    for p in pairs:
        got = record.get(p.reference_token_ids)
        assert got is not None and set(got) == set(reference_end_names(tiny_llama))
    assert record.get([1, 2, 3]) is None


@pytest.mark.parametrize("kept", ["all", "half", "none"])
def test_the_sweep_reads_the_record_and_equals_the_sweep_that_runs_both(filtered, tiny_llama, monkeypatch, kept):
    from circuits.models.forward import EndRecord
    from circuits.patching.engines.end_sweep import sweep
    from circuits.patching.engines.end_sweep_plain import reference_path

    pairs, full = filtered
    record = EndRecord(full.names, full.budget_bytes, dict(full.rows))
    if kept != "all":
        record.keep_only([p.reference_token_ids for p in pairs[: len(pairs) // 2]] if kept == "half" else [])
    ran = counted(monkeypatch)
    with_record = sweep(tiny_llama, pairs, "path", record=record, progress=False).tensors()
    missing = {"all": 0, "half": len(pairs) - len(pairs) // 2, "none": len(pairs)}[kept]
    assert ran == ([missing] if missing else []) + [len(pairs)]  # the reference rows it lacks, then the counterfactual
    ran.clear()
    both = sweep(tiny_llama, pairs, "path", progress=False).tensors()
    assert ran == [len(pairs), len(pairs)]
    for k in SWEPT:
        torch.testing.assert_close(with_record[k], both[k], atol=1e-5, rtol=1e-5, msg=k)
    for k, v in both["baseline"].items():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            torch.testing.assert_close(with_record["baseline"][k], v, atol=1e-5, rtol=1e-5, msg=k)
    if kept == "all":  # and the plain loop (one run_with_hooks per component), the engine's own reference
        from circuits.data.pairs import as_batch

        plain = reference_path(tiny_llama, as_batch(pairs, tiny_llama), metric="logit_diff", positions="end")
        engine = sweep(tiny_llama, pairs, "path", record=record, progress=False).scores("logit_diff")
        torch.testing.assert_close(engine.heads, plain.heads, atol=1e-4, rtol=1e-4)


def test_a_record_over_its_budget_keeps_no_more_rows(tiny_llama):
    """The budget is checked before each batch: the batch that fills it is kept whole, no later one."""
    from circuits.models.forward import EndRecord, end_residual_batches
    from circuits.patching.core.end_layers import reference_end_names

    record = EndRecord(reference_end_names(tiny_llama), 1)
    rows = [[1, 5, 7, 9], [1, 5, 7, 10], [2, 5, 7, 10]]
    list(end_residual_batches(tiny_llama, rows, batch_size=1, row_hooks=record.row_hooks(rows)))
    assert len(record.rows) == 1 and record.nbytes > 1
    assert record.get(rows[0]) is not None and record.get(rows[1]) is None


def test_the_identify_job_reads_filterings_runs(tiny_llama, monkeypatch):
    """The job itself: one reference pass fewer (the counterfactual prompts are the sweep's only END forward), the
    same pairs and key heads as a job whose sweep runs both."""
    from circuits.identify import job

    ran = counted(monkeypatch)
    one = job.identify(tiny_llama, task="addition", n_pairs=6, filter_correct=False, progress=False, warn=False,
                       refuse=False)
    assert ran == [len(one.pairs)]
    monkeypatch.setattr(job, "EndRecord", lambda *a, **k: None)
    ran.clear()
    two = job.identify(tiny_llama, task="addition", n_pairs=6, filter_correct=False, progress=False, warn=False,
                       refuse=False)
    assert ran == [len(two.pairs)] * 2
    assert [p.reference_token_ids for p in one.pairs] == [p.reference_token_ids for p in two.pairs]
    torch.testing.assert_close(one.sweep.head_logit, two.sweep.head_logit, atol=1e-5, rtol=1e-5, equal_nan=True)
    assert [h for h, _ in one.key_heads()] == [h for h, _ in two.key_heads()]
