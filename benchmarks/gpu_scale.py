"""The paper's 7B setting on one GPU: sweeps, Precise SFT and full SFT on LLaMA2-7B- and Mistral-7B-shaped models.

Models are built with random weights from the architectures' shapes (no download), converted by the same code that
loads a real checkpoint (:func:`circuits.models.loading.tl_config_from_hf`). For each shape, in one run:

- **sweeps**: every head and MLP on ``--pairs`` prompt pairs of ``--tokens`` tokens, path and activation patching,
  with the plain TransformerLens loop (one ``run_with_hooks`` per component) timed on ``--sample`` components and
  extrapolated, and the largest difference to it on that sample;
- **Precise SFT**: 32 heads in layers 12-17 (scaled to the shape), ``--dtype`` mixed precision (fp32 masters),
  samples/s and peak GPU memory;
- **full SFT**: every weight, fp32 shards with their AdamW state on the CPU (FSDP2 ``CPUOffloadPolicy``, one GPU),
  compute in ``--dtype``; samples/s and peak GPU memory, or the error it meets (host memory is checked first).

The last line reads ``path_s=.. activation_s=.. precise_sps=.. full_sps=.. precise_peak_gib=..`` for the first shape.
Targets on one H100, LLaMA2-7B shape, bf16 (docs/gpu.md): path <= 1.0 s, activation <= 1.5 s, Precise SFT >= 2x full
SFT's samples/s with peak <= 40 GiB.

    python benchmarks/gpu_scale.py                          # a GPU: llama2-7b and mistral-7b
    python benchmarks/gpu_scale.py --shape tiny             # the same code path at a small shape (CPU smoke run)
"""

from __future__ import annotations

import argparse
import os
import random

import _bench  # first: passive OpenMP waiting before torch loads

import torch

from circuits.data.pairs import PairBatch, PromptPair
from circuits.patching import all_components, sweep
from circuits.patching.engines.end_sweep_plain import cache_runs, patch_component_plain
from circuits.models import backend
from circuits.models.loading import tl_config_from_hf
from circuits.sft import FinetuneConfig, finetune
from circuits.sft.data import TokenizedExample

# Hugging Face config fields of each shape (LLaMA2-7B: multi-head attention; Mistral-7B: 8 K/V heads, 4096 window).
SHAPES: dict[str, dict] = {
    "llama2-7b": dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096,
                      rms_norm_eps=1e-5, rope_theta=10000.0),
    "mistral-7b": dict(model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768,
                       rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=4096),
    "tiny": dict(model_type="llama", hidden_size=128, intermediate_size=344, num_hidden_layers=8, num_attention_heads=8,
                 num_key_value_heads=4, vocab_size=2048, max_position_embeddings=512, rms_norm_eps=1e-5,
                 rope_theta=10000.0),
}


def hf_config(shape: str):
    from transformers import LlamaConfig, MistralConfig

    fields = dict(SHAPES[shape])
    kind = fields.pop("model_type")
    return (MistralConfig if kind == "mistral" else LlamaConfig)(**fields)


def build_model(shape: str, dtype: torch.dtype, device: str):
    """A random-weight ``HookedTransformer`` of ``shape``, initialised directly on ``device``."""
    from transformer_lens import HookedTransformer

    torch.manual_seed(0)
    cfg = tl_config_from_hf(hf_config(shape), dtype, device)
    cfg.init_weights = True  # the loader leaves weights uninitialised for a state dict; here nothing overwrites them
    with torch.device(device):
        model = HookedTransformer(cfg, move_to_device=False)
    return backend.attach(model.eval())  # built here, not by load_model: it carries its backend too


def random_pairs(vocab: int, n: int, tokens: int, seed: int = 0) -> list[PromptPair]:
    """Pairs of random prompts that differ in two operand positions (the shape of the paper's arithmetic pairs)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ref = [rng.randrange(3, vocab) for _ in range(tokens)]
        cf = list(ref)
        for pos in (tokens // 3, 2 * tokens // 3):
            cf[pos] = rng.randrange(3, vocab)
        out.append(PromptPair("", "", "", rng.randrange(3, vocab), tuple(ref), tuple(cf)))
    return out


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_sweeps(model, batch: PairBatch, args, device: str) -> dict:
    comps = all_components(model)
    sample = _bench.sample_components(model.cfg.n_layers, model.cfg.n_heads, args.sample, mlp_share=6, head_step=7)
    sync = lambda: synchronize(device)  # noqa: E731
    out = {}
    for mode in ("path", "activation"):
        engine = _bench.measure(lambda: sweep(model, batch, mode, progress=False, memory_mb=args.memory_mb), sync=sync,
                                warmup=lambda: sweep(model, batch.select(slice(0, 2)), mode, progress=False,
                                                     memory_mb=args.memory_mb))
        result, engine_s = engine.value, engine.seconds
        caches = cache_runs(model, batch)
        plain = _bench.measure(lambda caches=caches: {c: patch_component_plain(model, batch, c, mode, result.baseline,
                                                                               caches) for c in sample}, sync=sync)
        worst = max(_bench.max_abs_diff(_bench.sweep_values(result, c), values) for c, values in plain.value.items())
        plain_s = _bench.extrapolate(plain.seconds, len(sample), len(comps))
        del caches, plain
        out[mode] = {"engine_s": engine_s, "plain_s": plain_s, "ratio": plain_s / engine_s, "max_abs_diff": worst}
        print(f"  {mode:>10} sweep: {len(comps)} components x {len(batch)} pairs in {engine_s:.2f} s; plain loop "
              f"{plain_s:.1f} s (timed on {len(sample)}, extrapolated): {plain_s / engine_s:.0f}x; "
              f"max |diff| {worst:.1e}", flush=True)
    return out


def tuned_heads(n_layers: int, n_heads: int, k: int = 32) -> tuple[tuple[int, int], ...]:
    """``k`` heads spread over layers 12-17 of 32 (the same share of the depth for other shapes)."""
    lo, hi = round(12 * n_layers / 32), max(round(17 * n_layers / 32), round(12 * n_layers / 32))
    layers = list(range(lo, hi + 1))
    grid = [(l, h) for l in layers for h in range(n_heads)]
    n = min(k, len(grid))
    return tuple(sorted({grid[i * len(grid) // n] for i in range(n)}))


def train_examples(vocab: int, n: int, tokens: int, seed: int = 1) -> list[TokenizedExample]:
    rng = random.Random(seed)
    return [TokenizedExample(tuple(rng.randrange(3, vocab) for _ in range(tokens)), tokens // 2) for _ in range(n)]


def peak_gib(device: str) -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else float("nan")


def reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def time_training(model, config: FinetuneConfig, examples, device: str) -> tuple[float, float]:
    """Samples/s over ``config.max_steps`` steps after a one-step warm-up, and peak GPU memory."""
    result = _bench.measure(lambda: finetune(model, examples, config, progress=False),
                            warmup=lambda: (finetune(model, examples, config.replace(max_steps=1), progress=False),
                                            reset_peak(device))).value
    return result.samples_per_s, peak_gib(device)


def host_memory_gib() -> float:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (ValueError, OSError):
        return float("inf")


def run_shape(shape: str, args, device: str, dtype: torch.dtype) -> dict:
    print(f"{shape}: building a random-weight model in {args.dtype} on {device}", flush=True)
    model = build_model(shape, dtype, device)
    cfg = model.cfg
    n_params = sum(p.numel() for p in model.parameters())
    print(f"  {n_params / 1e9:.2f}B parameters, {cfg.n_layers} layers x {cfg.n_heads} heads "
          f"({cfg.n_key_value_heads or cfg.n_heads} K/V), d_mlp {cfg.d_mlp}", flush=True)
    pairs = random_pairs(cfg.d_vocab, args.pairs, args.tokens)
    batch = PairBatch.from_pairs(pairs, 0, device=device)
    model.requires_grad_(False)
    sweeps = time_sweeps(model, batch, args, device)

    heads = tuned_heads(cfg.n_layers, cfg.n_heads)
    examples = train_examples(cfg.d_vocab, args.batch_size * args.steps, args.train_tokens)
    common = dict(model=shape, lr=2e-5, batch_size=args.batch_size, micro_batch_size=args.micro_batch_size, epochs=1,
                  max_steps=args.steps, warmup_ratio=0.0, max_length=args.train_tokens, dtype=args.dtype)
    precise_sps, precise_peak = time_training(model, FinetuneConfig(heads=heads, **common), examples, device)
    print(f"  Precise SFT ({len(heads)} heads in layers {heads[0][0]}-{heads[-1][0]}, {args.dtype} + fp32 masters): "
          f"{precise_sps:.1f} samples/s, peak {precise_peak:.1f} GiB", flush=True)
    del model
    reset_peak(device)

    full_sps, full_peak, full_error = float("nan"), float("nan"), ""
    need = n_params * 22 / 2**30  # fp32 weights + gradients + AdamW moments on the host, and the fp32 build
    if need > host_memory_gib():
        full_error = f"needs about {need:.0f} GiB of host memory, {host_memory_gib():.0f} GiB available"
    else:
        try:
            fp32 = build_model(shape, torch.float32, "cpu")  # fp32 shards are the masters; FSDP moves them
            full_sps, full_peak = time_training(fp32, FinetuneConfig(full=True, cpu_offload=True, **common),
                                                examples, device)
            del fp32
        except (RuntimeError, MemoryError, ValueError) as err:  # out of memory, or what else full SFT meets
            full_error = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    if full_error:
        print(f"  full SFT (one GPU, optimizer state on the CPU): not run: {full_error}", flush=True)
    else:
        print(f"  full SFT (FSDP2, one {'GPU' if device == 'cuda' else 'CPU process'}, fp32 shards + AdamW state "
              f"on the CPU, {args.dtype} compute): "
              f"{full_sps:.1f} samples/s, peak {full_peak:.1f} GiB; Precise SFT / full SFT = "
              f"{precise_sps / full_sps:.2f}x", flush=True)
    return {"path_s": sweeps["path"]["engine_s"], "activation_s": sweeps["activation"]["engine_s"],
            "precise_sps": precise_sps, "full_sps": full_sps, "precise_peak_gib": precise_peak,
            "full_peak_gib": full_peak, "sweeps": sweeps, "full_error": full_error}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default=None, help=f"comma-separated, from {', '.join(SHAPES)} (default: the two "
                                                      "7B shapes on a GPU, tiny on a CPU)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--pairs", type=_bench.count(1, 100_000), default=None,
                        help="sweep pairs (default 100; tiny: 16)")
    parser.add_argument("--tokens", type=_bench.count(2, 100_000), default=24, help="tokens per prompt of a pair")
    parser.add_argument("--sample", type=_bench.count(1, 100_000), default=None,
                        help="components timed with the plain loop (24; tiny: 8)")
    parser.add_argument("--memory-mb", type=_bench.amount(1, 10_000_000), default=None,
                        help="sweep budget (GPU 16000, CPU 1024)")
    parser.add_argument("--train-tokens", type=_bench.count(2, 100_000), default=None,
                        help="tokens per training sample (256; tiny: 64)")
    parser.add_argument("--batch-size", type=_bench.count(1, 100_000), default=None,
                        help="samples per step (16; tiny: 4)")
    parser.add_argument("--micro-batch-size", type=_bench.count(1, 100_000), default=None, help="(8; tiny: 2)")
    parser.add_argument("--steps", type=_bench.count(1, 100_000), default=3, help="timed optimizer steps")
    _bench.add_arguments(parser, model=False)
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shapes = (args.shape or ("llama2-7b,mistral-7b" if device == "cuda" else "tiny")).split(",")
    unknown = set(shapes) - set(SHAPES)
    if unknown:
        parser.error(f"unknown shape {sorted(unknown)}; accepted: {', '.join(SHAPES)}")
    small = all(s == "tiny" for s in shapes)
    for name, big, tiny in (("pairs", 100, 16), ("sample", 24, 8), ("train_tokens", 256, 64), ("batch_size", 16, 4),
                            ("micro_batch_size", 8, 2), ("memory_mb", 16000 if device == "cuda" else 1024, 1024)):
        if getattr(args, name) is None:
            setattr(args, name, tiny if small else big)
    _bench.setup(args)
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[args.dtype]
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"device: {name}, torch {torch.__version__}, dtype {args.dtype}", flush=True)
    results = {shape: run_shape(shape, args, device, dtype) for shape in shapes}
    first = results[shapes[0]]
    if shapes[0] == "llama2-7b" and device == "cuda":
        ok = lambda c: "met" if c else "MISSED"  # noqa: E731
        print(f"targets (H100, LLaMA2-7B, bf16): path <= 1.0 s {ok(first['path_s'] <= 1.0)}, activation <= 1.5 s "
              f"{ok(first['activation_s'] <= 1.5)}, Precise >= 2x full {ok(first['precise_sps'] >= 2 * first['full_sps'])}"
              f", Precise peak <= 40 GiB {ok(first['precise_peak_gib'] <= 40)}")
    _bench.finish(args, **{k: first[k] for k in ("path_s", "activation_s", "precise_sps", "full_sps",
                                                 "precise_peak_gib")})
    return results


if __name__ == "__main__":
    main()
