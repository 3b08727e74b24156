"""Figure 4 and the MMLU check: knock out the key heads found on the addition templates and measure
next-token accuracy on SVAMP, multi-digit sums, decimals and time spans, and MMLU (humanities)
letter accuracy, before and after; k random heads as a control.
Run: ``python experiments/fig4_transfer.py [--n 48 --n-mmlu 40]``; ``--replot`` redraws.
The same job as ``circuits transfer --heads-from results/identify/addition`` (:mod:`circuits.validate.job`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as C
import _tables as T

from circuits.config import option
from circuits.validate.config import TransferSets
from circuits.validate.transfer import TransferResult
from circuits.validate.job import transfer_result
from circuits.viz.figures import write_figure


@dataclass(frozen=True)
class Config(C.KeyHeadConfig, TransferSets):
    out: str = option("results/fig4_transfer")


def main(config: Config, model=None) -> TransferResult:
    t = C.Timer()
    model = model or C.model_for(config.model, config.dtype)
    r = C.identify_result(config, model=model)
    result = transfer_result(model, r, config)  # the job of `circuits transfer`
    t("transfer and mmlu")
    result.save(config.out)
    return result


def published(result: TransferResult) -> dict:
    """The table of docs/results.md this result gives (experiments/_tables.py renders it; publish.py copies it)."""
    keys = ("n", "accuracy_before", "accuracy_after", "accuracy_random_heads")
    return {"fig4_transfer": {"render": "fig4_transfer", "data": {
        "key_heads": [list(h) for h in result.key_heads], "n_random_heads": len(result.random_heads),
        "results": {k: {f: v[f] for f in keys if f in v} for k, v in result.results.items()}}}}


def plot(result: TransferResult, out: Path) -> Path:
    T.write_published(out, published(result))
    return write_figure(result.figure(), Path(out) / "figure.html")


if __name__ == "__main__":
    C.run(Config, main, plot)
