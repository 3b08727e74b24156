"""The one tiny-model factory of the tests, and the SmolLM2 tokenizer they share.

Tiny models are random Hugging Face models of each family the loader supports (:data:`FAMILIES`: Llama,
Llama 3 with RoPE scaling, Mistral with and without a sliding window, Qwen2, Qwen3, Gemma 2, Gemma 3), all with
grouped-query attention and rotary positions, over
SmolLM2's vocabulary, saved to a folder and loaded with :func:`circuits.models.load_model`, so every tiny
test also goes through the real loading path. Weights are scaled up from the default initialisation so that
patching effects are far from 0 and comparisons bite.
"""

from __future__ import annotations

import copy
import functools
import os
import random
import tempfile
from pathlib import Path

import torch


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer():
    """SmolLM2's own tokenizer (read from the GGUF file once, then from the cache; no TransformerLens import, so it
    serves both backends)."""
    from circuits.models.sources import load_tokenizer

    return load_tokenizer("smollm2")


# A prelude for a child Python (``python -c ARM_SIGINT + code``) whose Ctrl-C a test sends: it wraps signal.signal
# before anything of circuits is imported and prints "armed" once the toolkit's start-up SIGINT handler is in place,
# the state such a test waits for. A SIGINT before that point lands in Python's own start-up or import machinery,
# outside any code of ours, where no handler can be yet; a test that sent it a fixed time after start failed under load
# (issue 44).
ARM_SIGINT = ("import signal as _s; _set = _s.signal\n"
              "def _watch(n, h):\n"
              "    r = _set(n, h)\n"
              "    if n == _s.SIGINT and getattr(h, '__module__', '') == 'circuits._startup': print('armed', flush=True)\n"
              "    return r\n"
              "_s.signal = _watch\n")

# Every family the loader and the engine are tested on (tests/unit/test_families.py), by what it adds.
FAMILIES = ("llama", "llama3", "mistral", "mistral_window", "qwen2", "qwen3", "gemma2", "gemma3")
WINDOW = 6  # sliding windows shorter than the tiny prompts, so local layers really mask


def tiny_hf_model(arch: str = "llama", *, vocab_size: int = 49152, n_layers: int = 3, seed: int = 0,
                  weight_std: float = 0.08, tie: bool = False):
    """A random tiny Hugging Face causal LM of family ``arch`` (see :data:`FAMILIES`): d_model 64, 4 heads, 2 K/V
    heads, d_head 16.

    - ``llama``, ``mistral``: plain Llama/Mistral shapes (norm weights 1, no biases);
    - ``llama3``: Llama-3.x NTK-by-parts RoPE scaling (``rope_type: llama3``);
    - ``mistral_window``: Mistral with a sliding window of :data:`WINDOW` tokens on every layer;
    - ``qwen2``: biases on Q/K/V; ``qwen3``: QK norm;
    - ``gemma2``: norms after attention and MLP, attention and final-logit soft-capping (caps low enough to bite),
      alternating local/global layers, ``query_pre_attn_scalar`` != ``head_dim``;
    - ``gemma3``: norms after attention and MLP, QK norm, local/global layers with their own RoPE bases.

    The new families also get random norm weights and biases, so folding and bias handling are exercised."""
    from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig,
                              LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                              Qwen3Config, Qwen3ForCausalLM)

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=n_layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5,
                  tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2)
    alternating = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)]
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common, rope_theta=10000.0))
    elif arch == "llama3":
        rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        model = LlamaForCausalLM(LlamaConfig(**common, rope_parameters=rope))
    elif arch == "mistral":
        model = MistralForCausalLM(MistralConfig(**common, rope_theta=10000.0, sliding_window=None))
    elif arch == "mistral_window":
        model = MistralForCausalLM(MistralConfig(**common, rope_theta=10000.0, sliding_window=WINDOW))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common, rope_theta=1000000.0))
    elif arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**common, head_dim=16, rope_theta=1000000.0))
    elif arch == "gemma2":
        model = Gemma2ForCausalLM(Gemma2Config(**common, head_dim=16, query_pre_attn_scalar=24,
                                               sliding_window=WINDOW, layer_types=alternating,
                                               attn_logit_softcapping=2.0, final_logit_softcapping=1.5,
                                               hidden_activation="gelu_pytorch_tanh"))
    elif arch == "gemma3":
        rope = {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
        model = Gemma3ForCausalLM(Gemma3TextConfig(**common, head_dim=16, query_pre_attn_scalar=16,
                                                   sliding_window=WINDOW, layer_types=alternating,
                                                   rope_parameters=rope, hidden_activation="gelu_pytorch_tanh"))
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}; known: {', '.join(FAMILIES)}")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.normal_(0, weight_std)
            elif arch not in ("llama", "mistral"):  # norm weights and biases (Gemma stores norms as w, used as 1 + w)
                p.add_(torch.randn_like(p) * (0.02 if name.endswith("bias") else 0.1))
    return model.eval()


def save_tiny(folder: Path, arch: str = "llama", **kw) -> Path:
    """Save a tiny model with SmolLM2's tokenizer into ``folder`` (a Hugging Face model folder)."""
    tok = smollm2_tokenizer()
    tiny_hf_model(arch, vocab_size=len(tok), **kw).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@functools.lru_cache(maxsize=8)
def tiny_dir(arch: str = "llama", **kw) -> Path:
    """A saved tiny model, once per process and settings."""
    return save_tiny(Path(tempfile.mkdtemp(prefix=f"tiny-{arch}-")), arch, **dict(kw))


# The families of the backend tier (tests/backends, run on TransformerLens 3.9 and 4.3): one per model family the
# TransformerBridge backend must cover (issue 23), all with grouped-query attention (4 query heads on 2 K/V heads).
BACKEND_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3")


def family_dir(family: str = "llama", *, n_layers: int = 2, seed: int = 0) -> Path:
    """A local Hugging Face folder (config.json, safetensors, SmolLM2's tokenizer) of a random two-layer model of
    ``family`` (:data:`BACKEND_FAMILIES`; see :func:`tiny_hf_model` for what each adds), saved once per process and
    settings; ``load_model(family_dir(f))`` loads it on either backend."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    return tiny_dir(family, n_layers=n_layers, seed=seed)


def family_model(family: str = "llama", *, dtype: str = "float32", n_layers: int = 2, seed: int = 0):
    """A fresh model of :func:`family_dir` loaded by :func:`circuits.models.load_model` on the installed backend
    (a ``HookedTransformer`` on TransformerLens 3.9, a ``TransformerBridge`` on 4.3); each call a new copy, so
    tests may change its weights."""
    return tiny_model(family, dtype=dtype, n_layers=n_layers, seed=seed)


@functools.lru_cache(maxsize=16)
def _loaded_tiny(arch: str, dtype: str, kw: tuple):
    from circuits.models import load_model

    return load_model(tiny_dir(arch, **dict(kw)), dtype=dtype, device="cpu")


def tiny_model(arch: str = "llama", *, dtype: str = "float32", **kw):
    """A fresh tiny model of the installed backend (each call a new copy: tests that train may change it).

    The first call per process and settings goes through :func:`circuits.models.load_model`; later ones deep-copy
    that model (weights, config, hooks none) and share its tokenizer, which no test changes: reading SmolLM2's
    tokenizer and converting the weights again was a third of the unit tier's time."""
    model = _loaded_tiny(arch, dtype, tuple(sorted(kw.items())))
    try:
        return copy.deepcopy(model, memo={id(model.tokenizer): model.tokenizer})
    except (TypeError, RuntimeError):  # a model whose wrappers cannot be deep-copied: load it again
        from circuits.models import load_model

        return load_model(tiny_dir(arch, **kw), dtype=dtype, device="cpu")


def shared_cli_run(argv: list[str]) -> Path:
    """The ``--out`` folder of ``circuits argv --out FOLDER`` (run in this process, asserted to exit 0), run once per
    test run for the same ``argv``: under pytest-xdist the first worker to ask runs it under a file lock and the others
    read its folder (two test files ran the same SmolLM2 identify, about 35 s each; issue 44). The folder is shared:
    read it, or copy it to write. It lies under the run's temporary root, removed at the end."""
    import fcntl
    import hashlib
    import json
    import shutil

    from circuits.cli import main as cli_main

    key = hashlib.sha256(json.dumps([str(a) for a in argv]).encode()).hexdigest()[:16]
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid{os.getpid()}")
    root = Path(tempfile.gettempdir()) / f"circuits-shared-cli-{run_id}-{key}"
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".complete").exists():
            shutil.rmtree(root, ignore_errors=True)  # a worker of this run that died midway
            root.mkdir()
            assert cli_main([*map(str, argv), "--out", str(root / "out")]) == 0, f"circuits {' '.join(map(str, argv))}"
            (root / ".complete").touch()
    return root / "out"


def frozen_model(name: str):
    """An embedded model (``smollm2``, ``gemma3-270m``) loaded on the CPU, its weights frozen: read-only."""
    from circuits.models import load_model

    return load_model(name, device="cpu").requires_grad_(False)


def mixed_pairs(tokenizer, n: int = 5, seed: int = 0):
    """Pairs of several templates (different lengths, few-shot prefixes), so right padding and per-pair END and
    first difference are exercised."""
    import random

    from circuits.data.pairs import render_pair
    from circuits.data.templates import FIGURE8, FIGURE10

    rng = random.Random(seed)
    templates = [*FIGURE8["addition"], FIGURE10[1], FIGURE10[8]]
    return [render_pair(templates[i % len(templates)], 1 + i % 4, 2 + i % 3, tokenizer, rng) for i in range(n)]


def aligned_pairs(tokenizer, n: int = 3, few_shot: bool = False, seed: int = 1):
    """Pairs of one template and one length (what TransformerLens's by-position patching functions take)."""
    import random

    from circuits.data.pairs import render_pair
    from circuits.data.templates import FIGURE8

    rng = random.Random(seed)
    return [render_pair(FIGURE8["addition"][0], a, 2, tokenizer, rng, few_shot=few_shot) for a in (1, 3, 4, 5, 6)[:n]]


# The seed of the neurons sampled by check_engine_against_reference: ``CIRCUITS_TEST_SEED``, else drawn once per
# process and named in any failure, so a failure reproduces.
SEED = int(os.environ.get("CIRCUITS_TEST_SEED") or random.SystemRandom().randrange(1_000_000))
NEURON_SAMPLE = 16


def neuron_sample(model, layer: int) -> tuple[list | None, str]:
    """The neurons of MLP ``layer`` the ``neurons`` engine is compared with its plain reference on, and how they were
    chosen: every one under ``CIRCUITS_TEST_ALL=1`` (``make test-neurons``, in ``make test-all`` and CI); else the first,
    the last and 14 drawn with :data:`SEED` (the reference runs one forward per neuron: the 96 neurons of a tiny
    family were 8-16 CPU s per test, about 250 worker-seconds over the two tiers; issue 44). ``None``: every neuron."""
    from circuits.types import Neuron

    d_mlp = model.cfg.d_mlp
    if os.environ.get("CIRCUITS_TEST_ALL") == "1" or d_mlp <= NEURON_SAMPLE:
        return None, f"every neuron of MLP {layer}"
    rng = random.Random(f"{SEED}:{d_mlp}")
    picked = sorted({0, d_mlp - 1} | set(rng.sample(range(1, d_mlp - 1), NEURON_SAMPLE - 2)))
    return [Neuron(layer, i) for i in picked], (
        f"neurons {picked} of MLP {layer} (sampled with seed {SEED}: CIRCUITS_TEST_SEED={SEED} reproduces them, "
        "CIRCUITS_TEST_ALL=1 compares every neuron)")


def check_engine_against_reference(model, tokenizer, name: str, metric: str = "logit_diff", n: int = 3):
    """Run ``ENGINES[name]`` and its reference on ``n`` mixed pairs and assert the two Scores agree (the ``neurons``
    engine on :func:`neuron_sample`'s neurons of its quick layer)."""
    import torch

    from circuits.data.pairs import PairBatch
    from circuits.patching.engines.registry import ENGINES
    from circuits.patching.core.scores import Scores

    engine = ENGINES[name]
    batch = PairBatch.from_pairs(mixed_pairs(tokenizer, n), 0)
    options, how = dict(engine.quick), ""
    if name == "neurons" and list(options.get("layers") or []) == [1]:
        sample, how = neuron_sample(model, 1)
        if sample is not None:
            options["neurons"] = sample
    ours = engine.run(model, batch, metric=metric, **options)
    ref = engine.reference(model, batch, metric=metric, **options)
    assert isinstance(ours, Scores) and isinstance(ref, Scores)
    assert (ours.metric, ours.sign, ours.offsets, sorted(ours.parts)) == (ref.metric, ref.sign, ref.offsets,
                                                                          sorted(ref.parts))
    for part, value in ours.parts.items():
        torch.testing.assert_close(value, ref.parts[part], atol=1e-4, rtol=1e-4, equal_nan=True,
                                   msg=lambda m: f"{name} {part} ({how or 'quick options'}): {m}")
    assert set(ours.parts) >= set(engine.parts)  # the parts its entry declares
    assert ours[engine.parts[0]].nan_to_num().abs().max() > 1e-6  # not trivially 0
    return ours


def plain_pair_checks(model, pairs) -> dict[str, float]:
    """The validity checks by a plain forward pass of each prompt alone, read at its last token: the share of pairs
    answered (top token), the share whose counterfactual keeps the answer, and the full effect: how much the
    counterfactual moves the answer logit, ``-(mean cf logit - mean logit) / |mean logit|``."""
    import torch

    hits, keeps, logit, cf_logit = [], [], [], []
    with torch.no_grad():
        for p in pairs:
            ref = model(torch.tensor([p.reference_token_ids]))[0, -1]
            cf = model(torch.tensor([p.counterfactual_token_ids]))[0, -1]
            hits.append(int(ref.argmax()) == p.answer_token_id)
            keeps.append(int(cf.argmax()) == p.answer_token_id)
            logit.append(float(ref[p.answer_token_id]))
            cf_logit.append(float(cf[p.answer_token_id]))
    n = len(pairs)
    mean = sum(logit) / n
    return {"accuracy": sum(hits) / n, "counterfactual_keeps_answer": sum(keeps) / n,
            "full_effect": -(sum(cf_logit) / n - mean) / abs(mean)}


def spy_on_strategy(monkeypatch, module, strategy: str) -> list[str]:
    """Route ``module``'s ``run_ablation`` through the executor, forcing the masked forward when ``strategy`` is
    ``"masked"`` (else the executor's own choice), and record the strategy each call ran: the list returned."""
    from circuits.patching.ablation import executor

    seen: list[str] = []

    def spy(*args, **kwargs):
        out = executor.run_ablation(*args, **kwargs, strategy="masked" if strategy == "masked" else None)
        seen.append(out.strategy)
        return out

    monkeypatch.setattr(module, "run_ablation", spy)
    return seen
