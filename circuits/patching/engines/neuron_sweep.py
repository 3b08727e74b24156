"""Single MLP neurons as senders of the END engine (Nikankin et al. 2025: arithmetic is done by a few neurons).

A neuron ``(layer, i)`` is one entry of ``hook_post``; the MLP writes ``post @ W_out + b_out``, so patching the
neuron at END with its counterfactual value adds ``(post_cf[i] - post_ref[i]) * W_out[i]`` to the residual stream
at END after layer ``layer``. From there the END engine's pieces carry it to the logits, exactly as for a whole
MLP sender: path patching adds the frozen heads' reference attention output and recomputes the MLPs on the END
vector; activation patching recomputes attention at END over the reference run's cached keys and values. Every
neuron of a layer is one row of a ``[neuron, pair, d_model]`` END state, so a whole layer (1,536 neurons on
SmolLM2) is a few batched passes. Tests assert equality with the plain loop (one ``run_with_hooks`` per neuron).

When the metric needs only the answer's logit or logit difference (not its probability), the readout multiplies
the final END vector by the two columns of ``W_U`` it needs instead of the whole vocabulary: for a layer of
neurons that is most of the work saved.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from dataclasses import dataclass, field

import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from circuits.io import Shapes
from circuits.models.backend import Model, act_name
from circuits.data.pairs import Pairs, as_batch
from circuits.patching.core.end_layers import (_post_norm, attention_at_end, baseline_from, check_supported, collect_runs,
                                          mlp_at_end, readout)
from circuits.patching.engines.end_sweep import rows_for_budget
from circuits.patching.core.metrics import DEFAULT_METRIC, Baseline, Metric, get_metric, PROB_METRICS
from circuits.patching.core.ranking import contributions, order
from circuits.patching.core.readouts import MetricLookup, Readouts, checked_neurons
from circuits.patching.core.scores import Scores
from circuits.types import MODES, Mode, Neuron


@dataclass
class NeuronSweep(MetricLookup):
    """Patched END quantities for each neuron in ``neurons``, ``[neuron, pair]`` (float32; ``prob`` NaN unless
    asked for)."""

    mode: Mode
    baseline: Baseline
    neurons: list[Neuron]
    readouts: Readouts
    custom_metrics: dict[str, Metric] = field(default_factory=dict)

    def scores(self, metric: str | Metric = DEFAULT_METRIC) -> Scores:
        """:class:`~circuits.patching.core.scores.Scores` of each swept neuron, ``[neuron]`` in ``neurons``' order (by
        layer: :meth:`Scores.by_layer`)."""
        m = self.metric(metric)
        return Scores({"neurons": m.effect(self.readouts, self.baseline)}, m.name, m.sign, self.baseline,
                      labels={"neurons": list(self.neurons)}, engine=f"neurons-{self.mode}",
                      per_pair={"neurons": m.per_pair(self.readouts, self.baseline)})

    def tensors(self) -> dict:
        return {**self.readouts.tensors("neuron"), "neurons": [list(n) for n in self.neurons],
                "baseline": self.baseline.to_dict(), "mode": self.mode}

    @classmethod
    def from_tensors(cls, d: dict, source: str | Path = "the neuron sweep") -> NeuronSweep:
        """The sweep :meth:`tensors` gave (``source``: the file it was read from), checked first: ``neuron_*``
        ``[neuron, pair]`` over as many neurons as it names and the baseline's pairs; else one
        :class:`~circuits.io.TensorError` line naming ``source`` and the tensor."""
        shapes = Shapes(source)
        if not isinstance(d, dict) or d.get("mode") not in ("path", "activation") or not isinstance(d.get("neurons"), list):
            raise shapes.fail("it is not a neuron sweep's tensors (mode path or activation, the neurons' names)")
        neurons = checked_neurons(d, "neurons", shapes)
        readouts = Readouts.checked(d, "neuron", ("neuron", "pair"), shapes)
        return cls(d["mode"], Baseline.checked(d.get("baseline"), shapes), neurons, readouts)


def layer_neurons(model: Model, layers: Sequence[int]) -> list[Neuron]:
    """Every neuron of ``layers``."""
    for l in layers:
        if not 0 <= int(l) < model.cfg.n_layers:
            raise ValueError(f"MLP layer {l} is outside this model (layers 0..{model.cfg.n_layers - 1}).")
    return [Neuron(int(l), i) for l in layers for i in range(model.cfg.d_mlp)]


@torch.no_grad()
def end_posts(model: Model, batch, runs, layers: Sequence[int]) -> tuple[dict[int, Tensor], dict[int, Tensor]]:
    """``hook_post`` at END of the reference (recomputed from the cached END ``resid_mid``, the model's own MLP) and
    of the counterfactual run (one forward up to the last layer needed), ``{layer: [pair, d_mlp]}``."""
    ref: dict[int, Tensor] = {}
    for l in layers:
        got: dict[str, Tensor] = {}
        name = act_name("post", l)
        with model.hooks(fwd_hooks=[(name, lambda act, hook: got.__setitem__("post", act.detach()))]):
            mlp_at_end(model, l, runs.resid_mid[l])
        ref[l] = got["post"].reshape(len(batch), -1)
    cf: dict[int, Tensor] = {}
    rows = torch.arange(len(batch), device=batch.end.device)

    def grab(l: int):
        def hook(act: Tensor, hook) -> None:
            cf[l] = act[rows, batch.end].detach()
        return hook

    model.run_with_hooks(batch.counterfactual, fwd_hooks=[(act_name("post", l), grab(l)) for l in layers],
                         stop_at_layer=max(layers) + 1)
    return ref, cf


@torch.no_grad()
def sweep_neurons(
    model: Model,
    pairs: Pairs,
    mode: Mode = "path",
    *,
    neurons: Sequence[Neuron] | None = None,
    layers: Sequence[int] | None = None,
    metrics: Sequence[str | Metric] = (),
    prob: bool = False,
    memory_mb: float = 1024,
    progress: bool = True,
) -> NeuronSweep:
    """Patch single MLP neurons at END (path or activation patching), many per pass.

    Args:
        neurons: the senders; or ``layers``: every neuron of those MLP layers.
        metrics: custom metrics (functions of the END logits); they need the whole vocabulary, as ``prob`` does.
        prob: also read the answer probability (a log-sum-exp over the vocabulary per row).
    """
    if mode not in MODES:
        raise ValueError(f"Unknown mode {mode!r}; accepted: {', '.join(MODES)}")
    check_supported(model)
    if neurons is None:
        if layers is None:
            raise ValueError("Give neurons (e.g. MLP19.1234) or MLP layers whose every neuron is patched.")
        neurons = layer_neurons(model, layers)
    neurons = sorted({Neuron(*n).check(model.cfg.n_layers, model.cfg.d_mlp) for n in neurons})
    if not neurons:
        raise ValueError("No neurons to patch.")
    custom = [m for m in map(get_metric, metrics) if m.logits_fn is not None]
    full_readout = prob or bool(custom)
    batch = as_batch(pairs, model)
    cfg = model.cfg
    L, P, device = cfg.n_layers, len(batch), cfg.device
    runs = collect_runs(model, batch, need_kv=(mode == "activation"))
    base = baseline_from(model, batch.answer.to(device), runs, custom, batch.cf_label)
    end = batch.end.to(device)
    layers_used = sorted({n.layer for n in neurons})
    post_ref, post_cf = end_posts(model, batch, runs, layers_used)
    out = Readouts.empty((len(neurons), P), [m.name for m in custom])
    per_chunk = rows_for_budget(model, P, memory_mb)
    bar = tqdm(total=len(neurons), desc=f"{mode} patching neurons", unit="neuron", disable=not progress)
    for c0 in range(0, len(neurons), per_chunk):
        chunk = neurons[c0 : c0 + per_chunk]
        x: Tensor | None = None
        for layer in range(chunk[0].layer, L):
            if x is not None:
                if mode == "path":
                    x = x + runs.attn_out[layer][None]
                else:
                    x = x + attention_at_end(model, layer, x, runs.keys[layer], runs.values[layer], end)
                x = x + mlp_at_end(model, layer, x)
            mine = [n for n in chunk if n.layer == layer]
            if mine:
                idx = torch.tensor([n.index for n in mine], device=device)
                delta = (post_cf[layer][:, idx] - post_ref[layer][:, idx]).T  # [neuron, pair]
                w_out = model.blocks[layer].mlp.W_out[idx]  # [neuron, d_model]
                if model.backend.post_norms():  # Gemma 2/3: the MLP's output is normalised before it joins
                    mlp = model.blocks[layer].mlp
                    raw = post_ref[layer] @ mlp.W_out
                    if getattr(mlp, "b_out", None) is not None:
                        raw = raw + mlp.b_out
                    new = runs.resid_mid[layer][None] + _post_norm(model, "ln2_post", layer,
                                                                   raw[None] + delta[..., None] * w_out[:, None, :])
                else:
                    resid_post = runs.resid_pre[layer + 1] if layer + 1 < L else runs.ref_end_resid
                    new = resid_post[None] + delta[..., None] * w_out[:, None, :]
                x = new if x is None else torch.cat([x, new])
        assert x is not None
        values = readout(model, x, base.answer, base.cf_answer, custom, prob=full_readout)
        for j in range(len(chunk)):
            out.put((c0 + j,), {k: v[j].cpu() for k, v in values.items()})
        bar.update(len(chunk))
    bar.close()
    return NeuronSweep(mode, base.to("cpu"), list(neurons), out, {m.name: m for m in custom})


def top_neurons(effects: Float[Tensor, " d_mlp"], sign: int, share: float) -> list[int]:
    """The ``share`` (e.g. 0.01) of a layer's neurons with the most important effects (by the metric's sign), at
    least one."""
    k = max(1, round(share * effects.numel()))
    return order(effects, sign)[:k].tolist()


def effect_shares(effects: Float[Tensor, " d_mlp"], sign: int, fractions: Sequence[float] = (0.5, 0.8, 0.9)) -> dict[str, float]:
    """How concentrated a layer's neuron effects are: the share of neurons whose effects, most important first, add
    up to each fraction of the sum of all important-direction effects (Nikankin et al.: ~1% of neurons)."""
    c = contributions(effects, sign)
    total = float(c.sum())
    out: dict[str, float] = {}
    cum = c.cumsum(0)
    for f in fractions:
        n = int((cum < f * total).sum()) + 1 if total > 0 else 0
        out[f"share_for_{int(f * 100)}pct"] = n / effects.numel()
    out["top1pct_of_total"] = float(cum[max(0, round(0.01 * effects.numel()) - 1)] / total) if total > 0 else 0.0
    return out


def score_neurons(model: Model, pairs: Pairs, *, metric: str | Metric, positions: str, progress: bool,
                  memory_mb: float, mode: Mode = "path", neurons: Sequence[Neuron] | None = None,
                  layers: Sequence[int] | None = None, **options) -> Scores:
    """The registry's ``neurons``: :func:`sweep_neurons` (every neuron of ``layers``, every MLP layer by default)
    scored by ``metric``."""
    layers = range(model.cfg.n_layers) if neurons is None and layers is None else layers
    prob = get_metric(metric).name in PROB_METRICS  # the probability's log-sum-exp only where the metric reads it
    return sweep_neurons(model, pairs, mode, neurons=neurons, layers=layers, prob=prob, memory_mb=memory_mb,
                         progress=progress, **options).scores(metric)
