"""What decides a Precise SFT study (``circuits sft-study``; saved as its ``config.json``): the arms, their seeds,
the learning-rate grid each arm's sweep scores on the validation split, the evaluation items, and the training run
every arm shares (one nested :class:`~circuits.sft.config.FinetuneConfig`).

Imports neither torch nor transformer_lens (the command line builds its flags from it)."""

from __future__ import annotations

from dataclasses import dataclass

from circuits.config import Config, count, option
from circuits.data.benchmarks import MATH_TASKS as WORD_TASKS
from circuits.sft.config import TRAIN_SOURCES, FinetuneConfig
from circuits.types import Head, parse_heads, parse_layers

# What a run keeps of its training (``--save-weights``): every arm's trained values but full SFT's, all, none.
SAVE_WEIGHTS = ("tuned", "all", "none")

# The arms (issue 39). ReFT (pyreft 0.1.0) is not among them: it requires transformers==4.45.1, and both lines pin
# transformers 5.x (docs/finetune.md, "Does choosing the circuit matter?").
ARMS: tuple[str, ...] = ("precise", "random", "precise_mlps", "lora", "full")
ARM_LABELS = {"precise": "Precise SFT (key heads)", "random": "Precise SFT (random heads)",
              "precise_mlps": "Precise SFT (key heads + key MLPs)", "lora": "LoRA (peft, matched parameters)",
              "full": "full SFT"}
# The attention projections LoRA adapts (the Hugging Face names of Llama, Mistral, Qwen and Gemma).
LORA_TARGETS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
# The frozen training fields the study sets per arm and run (no flag of their own here).
_PER_RUN = ("heads", "mlps", "full", "lr", "seed", "cpu_offload", "save_delta", "checkpoint_every")
# The shared training run: Table 1's mixture, 64 examples per source (192), one epoch of batch 16 (12 steps).
STUDY_TRAIN = FinetuneConfig(full=True, n_arithmetic=256, limit_per_source=64, batch_size=16, micro_batch_size=8,
                             epochs=1, max_length=160, save_delta=False)


@dataclass(frozen=True)
class StudyConfig(Config):
    """What decides a Precise SFT study: does choosing the circuit matter?

    Every arm trains from the same base model on the same data and steps (``--data``, ``--steps``, ...) and is scored
    on the same test items: Precise SFT of the key heads; of as many random heads from the key heads' layer range (N
    draws); of the key heads plus the key MLPs (whole); LoRA (peft) on the attention projections at the nearest
    rank to Precise SFT's parameter count; full SFT. Each arm's lr is the one of ``--lrs`` whose run (first seed)
    scores best on the validation items (never the test items); then each arm trains once per seed. Writes
    ``data.json`` (per-run, per-item scores, the sweep, timings) and ``table.md`` (95% intervals over seeds and items,
    each arm's paired difference from Precise SFT)."""

    train: FinetuneConfig = option(STUDY_TRAIN, skip=_PER_RUN, help="the training run every arm shares")
    key_heads: tuple[Head, ...] = option((), parse=parse_heads,
                                         help="the key heads (arm 1), LAYER.HEAD,...; default: the top --top-k of "
                                              "--heads-from")
    heads_from: str = option("results/identify/addition", help="a `circuits identify` folder the key heads and MLPs "
                                                               "come from when not listed")
    top_k: int = count(8, per_model="heads", help="key heads taken from --heads-from")
    key_mlps: tuple[int, ...] = option((), minimum=0, maximum=10_000, unique=True, parse=parse_layers,
                                       help="the key MLPs tuned whole beside the key heads (arm 3); default: the top "
                                            "--top-mlps of --heads-from")
    top_mlps: int = count(2, per_model="mlps", help="key MLPs taken from --heads-from")
    arms: tuple[str, ...] = option(ARMS, choices=ARMS, nonempty=True, unique=True, help="the arms run")
    random_draws: int = count(3, maximum=100, help="draws of random heads (arm 2), each an arm of its own seeds")
    draw_seed: int = option(0, minimum=0, help="seed of the random-head draws")
    seeds: tuple[int, ...] = option((0, 1, 2), minimum=0, nonempty=True, unique=True,
                                    help="training seeds of every arm (data order and items, LoRA's init); the study "
                                         "needs 3 or more")
    lrs: tuple[float, ...] = option((1e-5, 3e-5, 1e-4, 3e-4, 1e-3), above=0, maximum=1.0, nonempty=True, unique=True,
                                    help="learning rates each arm's sweep tries (scored on the validation items)")
    per_form: int = count(50, help="test items per held-out arithmetic form (single, multidigit, word, decimal)")
    two_digit: int = count(100, minimum=0, help="test items of two-digit addition not in any training set (0: none)")
    val_per_form: int = count(15, help="validation items per form (held-out forms and two-digit addition)")
    mmlu: int = count(0, minimum=0, help="MMLU test questions (0: none)")
    commonsenseqa: int = count(0, minimum=0, help="CommonsenseQA dev questions (0: none)")
    shots: int = count(5, minimum=0, maximum=5, help="solved examples before each MMLU/CommonsenseQA question (0: none)")
    perplexity: int = count(0, minimum=0, help="held-out general-text documents scored for word perplexity (circuits "
                                               "evaluate's perplexity task: MMLU validation questions with their "
                                               "answers; 0: none)")
    word_problems: int = count(0, minimum=0, help="questions of each --word-tasks benchmark, answered by greedy "
                                                  "generation as circuits evaluate does (0: none)")
    word_tasks: tuple[str, ...] = option(WORD_TASKS, choices=WORD_TASKS, nonempty=True, unique=True,
                                         help="the word-problem benchmarks --word-problems scores")
    math_shots: int = count(0, minimum=0, maximum=8, help="solved GSM8K examples before each word problem (0: none)")
    max_gen_toks: int = count(256, maximum=100_000, help="tokens a word problem's answer may take")
    eval_batch_size: int = count(16, maximum=100_000)
    n_boot: int = count(2000, maximum=100_000, help="bootstrap resamples of seeds and items")
    threads: int = count(0, minimum=0, help="torch threads per process (0: the cores available, shared among the "
                                            "workers)")
    workers: int = count(1, maximum=64, help="processes that train and score variants at the same time (each its own "
                                             "copy of the model; the variants dealt round-robin)")
    save_weights: str = option("tuned", choices=SAVE_WEIGHTS,
                               help="what each run keeps of its training in runs/, so a new evaluation trains nothing "
                                    "again: tuned (the trained slices or LoRA adapters of every arm but full SFT, a "
                                    "few MB each), all (full SFT's whole model too, fp32: 651 MB a run on SmolLM2), "
                                    "none")

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_heads", tuple(Head.parse(h) for h in self.key_heads))
        object.__setattr__(self, "key_mlps", tuple(int(m) for m in self.key_mlps))
        if self.train.dtype != "float32" and "lora" in self.arms:
            raise ValueError(f"--dtype {self.train.dtype}: the LoRA arm trains the Hugging Face model in float32; run "
                             "the study in float32 or leave lora out of --arms")
        if self.save_weights not in SAVE_WEIGHTS:  # (argparse checks the flag; this, a config built in Python)
            raise ValueError(f"--save-weights {self.save_weights}: must be one of {', '.join(SAVE_WEIGHTS)}")
        if set(self.train.sources) - set(TRAIN_SOURCES):
            raise ValueError(f"--data must be among {TRAIN_SOURCES}")

    @property
    def model(self) -> str:
        return self.train.model

    def reads_heads_from(self) -> bool:
        """Whether ``heads_from`` is read: for key heads not listed, or key MLPs not listed where an arm tunes them."""
        return not self.key_heads or ("precise_mlps" in self.arms and not self.key_mlps)

    def run_config(self, *, lr: float, seed: int, heads: tuple[Head, ...] = (), mlps: tuple[int, ...] = (),
                   full: bool = False) -> FinetuneConfig:
        """The training config of one run: the shared run with this arm's parameters, lr and seed."""
        return self.train.replace(heads=tuple(heads), mlps=tuple(mlps), full=full, lr=lr, seed=seed, save_delta=False)
