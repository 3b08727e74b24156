"""``circuits export``: a tuned model out of the toolkit, as a Hugging Face checkpoint.

Writes into ``--out`` (a new or empty folder, atomically): ``model.safetensors`` and ``config.json`` in the base
model's own architecture and parameter names, its generation config and tokenizer, and ``circuits_export.json``
(base model, delta, tuned heads and MLPs). ``AutoModelForCausalLM.from_pretrained(out)``, vLLM and lm-eval's
``hf`` backend load it without circuits:

    circuits export --delta results/ft/precise/delta.pt --out my-model/
    lm_eval --model hf --model_args pretrained=my-model,dtype=float32 --tasks gsm8k --limit 50

Folded norms are divided back out of the tuned rows; see :mod:`circuits.sft.export`.
"""

from __future__ import annotations

import argparse

from circuits.config import add_arguments, from_arguments
from circuits.sft.config import ExportConfig
from circuits.jobs import job


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("export", help=job("export").help,
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, ExportConfig, required=("delta",))
    p.add_argument("--out", required=True, help="a new or empty output folder")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from circuits.sft import export

    config = from_arguments(ExportConfig, args)
    out = export.run(config, args.out)
    print(f"wrote {out} (load with AutoModelForCausalLM.from_pretrained({str(out)!r}))")
    return 0
