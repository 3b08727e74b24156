"""Stage timings: exclusive nesting, nothing recorded outside a recording, summed across commands in one file."""

import time

import pytest

from circuits.cli import main
from circuits.timing import add_to_file, recording, stage, table, timed


class FakeClock:
    """circuits.timing's clock, advanced only by :meth:`sleep`: the stages' seconds are exact on any machine."""

    def __init__(self):
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_stages_are_exclusive_and_only_recorded_when_asked(monkeypatch):
    import types

    import circuits.timing

    clock = FakeClock()
    monkeypatch.setattr(circuits.timing, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    with stage("sweep"):  # no recording: nothing happens
        pass

    @timed("load")
    def load():
        clock.sleep(0.02)

    with recording() as rec:
        with stage("sweep"):
            clock.sleep(0.02)
            load()  # counts for load, not for the sweep around it
            clock.sleep(0.03)
    assert set(rec.seconds) == {"sweep", "load"}
    assert rec.seconds["sweep"] == pytest.approx(0.05) and rec.seconds["load"] == pytest.approx(0.02)
    text = table(rec.seconds)
    assert text.splitlines()[1].startswith("load") and text.splitlines()[-1].startswith("total")


def test_timings_file_sums_commands(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert add_to_file(path, {"load": 1.0}) == {"load": 1.0}
    assert add_to_file(path, {"load": 2.0, "sweep": 3.0}) == {"load": 3.0, "sweep": 3.0}
    from helpers import tiny_dir

    out = tmp_path / "identify"
    assert main(["--timings", str(path), "identify", "--model", str(tiny_dir("llama")), "--pairs", "2",
                 "--few-shot", "on", "--no-filter-correct", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Time per stage" in printed and "candidates" in printed and "filtering" in printed and "sweep" in printed
    assert {"load", "candidates", "filtering", "sweep", "write"} <= set(add_to_file(path, {}))


def test_the_table_shows_the_time_outside_the_stages_so_its_total_is_the_wall_clock(tmp_path, capsys, monkeypatch):
    """Issue 29: the demo's table summed 33.4 s of a 127 s run; the time no stage counts is its own row now."""
    from circuits.timing import OTHER, with_other

    seconds = with_other({"load": 2.0, "sweep": 1.0}, 10.0)
    assert seconds[OTHER] == 7.0 and with_other({"load": 2.0}, 1.0)[OTHER] == 0.0
    lines = table(seconds).splitlines()
    assert lines[-2].startswith("other (imports, setup") and lines[-1].startswith("total (wall clock)")
    assert lines[-1].split()[-1] == "10.0"
    from helpers import tiny_dir

    import types

    import circuits._startup
    import circuits.cli
    import circuits.timing

    class Ticking:  # every reading is 0.25 s after the last: the sum below is exact on a busy machine too
        def __init__(self):
            self.read = []

        def perf_counter(self) -> float:
            self.read.append(1000.0 + 0.25 * len(self.read))
            return self.read[-1]

    clock = Ticking()
    for module in (circuits._startup, circuits.cli, circuits.timing):
        monkeypatch.setattr(module, "time", types.SimpleNamespace(perf_counter=clock.perf_counter, sleep=time.sleep))
    monkeypatch.setattr(circuits._startup, "started", None)
    path = tmp_path / "t.json"
    assert main(["--timings", str(path), "identify", "--model", str(tiny_dir("llama")), "--pairs", "2",
                 "--few-shot", "on", "--no-filter-correct", "--out", str(tmp_path / "identify")]) == 0
    saved = add_to_file(path, {})
    # the command's first reading is its start, its last the end it counts the total to; the stages lie between
    assert saved[OTHER] > 0 and sum(saved.values()) == pytest.approx(clock.read[-1] - clock.read[0])
    assert 0 < sum(v for k, v in saved.items() if k != OTHER) < clock.read[-1] - clock.read[0]
    assert "total (wall clock)" in capsys.readouterr().out
