"""Does choosing the circuit matter? The Precise SFT study (issue 39): Precise SFT of the key heads against as many
random heads (3 draws), the key heads plus the key MLPs, LoRA (peft) at a matched parameter count and full SFT, each
arm's lr picked on a validation split, 3 seeds per arm, 95% intervals over seeds and items and each arm's paired
difference from Precise SFT (docs/finetune.md, "Does choosing the circuit matter?").

The same as ``circuits sft-study`` (:mod:`circuits.evaluation.study`); writes ``data.json`` and ``table.md`` into ``--out``:

    python experiments/sft_study.py --heads-from results/identify/addition --out results/sft-study
"""

from __future__ import annotations

import argparse
import sys

from circuits.config import add_arguments, from_arguments
from circuits.evaluation.study_config import StudyConfig


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, StudyConfig)
    parser.add_argument("--out", default="results/sft-study", help="the study's folder (default: results/sft-study)")
    args = parser.parse_args(argv)
    from circuits.evaluation.study import key_components, run

    try:
        config = from_arguments(StudyConfig, args)
        key_components(config)  # the key heads and MLPs exist, before any model loads
    except ValueError as e:  # a value the config refuses: one line, exit 2, as the command line does
        parser.error(str(e))

    result = run(config, args.out)
    print(result.markdown())
    print(result.time_line())
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
