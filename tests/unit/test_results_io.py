"""Atomic files and folders, and typed results that know their kind and version: every kind in RESULT_TYPES saves
and loads back equal, its typed config included, and a broken folder is one ResultError line."""

import copy
import dataclasses
import json

import pytest
from result_cases import build_results, main_file

from circuits.evaluation.result import EvalResult
from circuits.io import atomic_dir, read_json, read_jsonl, write_json
from circuits import jobs
from circuits.versions import provenance
from circuits.results import (COMMON_FILES, MARKER, RESULT_TYPES, Result, ResultError, detect_kind, load_result,
                              own_files, result_type)
from circuits.validate.knockout import KnockoutConfig, KnockoutResult
from circuits.validate.transfer import TransferResult


def test_failed_json_write_leaves_the_old_file_and_no_temp(tmp_path):
    path = write_json(tmp_path / "a.json", {"x": 1})
    with pytest.raises(TypeError):
        write_json(path, {"x": object()})
    assert read_json(path) == {"x": 1} and sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_failed_folder_keeps_the_previous_result(tmp_path):
    out = tmp_path / "fig"
    with atomic_dir(out) as tmp:
        (tmp / "data.json").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic_dir(out) as tmp:
            (tmp / "data.json").write_text("2")
            raise RuntimeError("interrupted")
    assert (out / "data.json").read_text() == "1" and sorted(p.name for p in tmp_path.iterdir()) == ["fig"]


def test_read_errors_name_the_file(tmp_path):
    (tmp_path / "x.json").write_text('{"a": ')
    with pytest.raises(ValueError, match=r"x.json is not valid JSON.*truncated"):
        read_json(tmp_path / "x.json")
    with pytest.raises(FileNotFoundError, match="y.json not found"):
        read_json(tmp_path / "y.json")
    (tmp_path / "p.jsonl").write_text('{"a": 1}\n{"a": ')
    with pytest.raises(ValueError, match=r"p.jsonl, line 2"):
        read_jsonl(tmp_path / "p.jsonl")


def test_a_result_names_its_config_type_once_in_its_base():
    """``class R(Result[C])`` makes ``C`` its ``config_type`` and ``config`` its first field, checked on construction;
    a subclass keeps it, and a class that sets ``config_type`` itself (a lazy one, or a subclass's) keeps its own."""

    @dataclasses.dataclass(eq=False, repr=False)
    class Toy(Result[KnockoutConfig]):
        kind = "toy"
        total: int

    @dataclasses.dataclass(frozen=True)
    class Wider(KnockoutConfig):
        extra: int = 0

    @dataclasses.dataclass(eq=False, repr=False)
    class Own(Toy):
        config_type = Wider

    assert Toy.config_type is KnockoutConfig and Own.config_type is Wider
    assert [f.name for f in dataclasses.fields(Toy)] == ["config", "total"]
    assert Toy(KnockoutConfig(), 3).total == 3 and Toy(Wider(), 3).config == Wider()
    with pytest.raises(TypeError, match="Toy's config must be a KnockoutConfig"):
        Toy("not a config", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Own's config must be a Wider"):
        Own(KnockoutConfig(), 3)
    # every kind the table lists: a config class, the one named in its base unless it sets its own (lazy ones)
    for kind in RESULT_TYPES:
        cls = result_type(kind)
        named = [a for b in cls.__dict__.get("__orig_bases__", ()) for a in getattr(b, "__args__", ())]
        assert isinstance(cls.config_type, type) and named in ([cls.config_type], [])
        assert dataclasses.fields(cls)[0].name == "config"


@pytest.fixture(scope="module")
def results(tiny_llama, tmp_path_factory):
    return build_results(tiny_llama, tmp_path_factory.mktemp("jobs"))


def test_every_kind_has_a_case(results):
    """A kind added to RESULT_TYPES without a case in tests/result_cases.py fails here."""
    assert sorted(results) == sorted(RESULT_TYPES)


@pytest.mark.parametrize("kind", list(RESULT_TYPES))
def test_every_kind_loads_back_equal_with_its_typed_config(results, kind, tmp_path):
    r = results[kind]
    cls = result_type(kind)
    assert type(r) is cls and cls.__eq__ is Result.__eq__ and cls.__repr__ is Result.__repr__
    assert type(r.config) is cls.config_type  # the library's config class, frozen
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.config.model = "other"  # type: ignore[misc]
    out = r.save(tmp_path / kind)
    marker = json.loads((out / MARKER).read_text())
    # a folder replaced whole lists its files (nothing else is replaced with it); a working folder writes in place
    files = {} if cls.in_place else {"files": sorted(p.name for p in out.iterdir())}
    # and what made it (issue 29): this process's backend, library versions and commit, read back by load
    assert marker == {"kind": kind, "version": cls.version, **files, "provenance": provenance()}
    # what it writes is what the job table says its jobs write (so a later save may replace it)
    assert {p.name for p in out.iterdir()} <= own_files(out) == COMMON_FILES | jobs.files_of(kind)
    assert r.save(out) == out  # and so it replaces its own folder
    assert json.loads((out / "config.json").read_text()) == json.loads(json.dumps(r.config.to_json()))
    for back in (cls.load(out), load_result(out)):
        assert type(back) is cls and back == r and back.provenance == r.provenance == provenance()
        assert type(back.config) is type(r.config) and back.config == r.config
        first = dataclasses.fields(r.config)[0].name  # typed: attribute access works loaded as fresh
        assert getattr(back.config, first) == getattr(r.config, first)
    again = cls.load(cls.load(out).save(tmp_path / f"{kind}-again"))
    assert again == r


def test_equality_compares_tensors_floats_and_configs(results):
    r = results["screen"]
    other = copy.deepcopy(r)
    assert other == r and other is not r
    other.head_effects = other.head_effects.clone()
    other.head_effects[0, 0, 0] += 1e-6  # one float32 step away: not equal
    assert other != r
    lens = copy.deepcopy(results["lens"])
    lens.means["delta_C"][0] = lens.means["delta_C"][0] + 1e-12
    assert lens != results["lens"]
    moved = dataclasses.replace(results["knockout"], config=results["knockout"].config.replace(seed=1))
    assert moved != results["knockout"]
    with pytest.raises(TypeError):
        hash(r)


def test_repr_is_short_and_names_shapes(results):
    for kind, r in results.items():
        text = repr(r)
        assert text.startswith(f"{type(r).__name__}[{kind}](config={type(r.config).__name__}(")
        assert len(text) < 1200, (kind, len(text))
        assert "tensor(" not in text and "reference_token_ids" not in text
    assert "head_effects=Tensor[3, 4, " in repr(results["screen"]) and "task='addition'" not in repr(results["screen"])
    assert "pairs=list[" in repr(results["identify"]) and "model='tiny'" in repr(results["identify"])


def test_config_of_another_type_is_one_clear_line(results):
    with pytest.raises(TypeError, match="TransferResult's config must be a TransferConfig"):
        TransferResult({"task": "addition"}, {}, [])  # type: ignore[arg-type]


def test_a_script_config_extends_the_library_config(results, tmp_path):
    """A figure script saves its own config (more fields); the result loads it as the library's config class."""

    @dataclasses.dataclass(frozen=True)
    class ScriptConfig(KnockoutConfig):
        out: str = "results/fig3"

    r = results["knockout"]
    mine = dataclasses.replace(r, config=ScriptConfig(**r.config.to_json(), out=str(tmp_path / "k")))
    back = KnockoutResult.load(mine.save(tmp_path / "k"))
    assert json.loads((tmp_path / "k" / "config.json").read_text())["out"] == str(tmp_path / "k")
    assert type(back.config) is KnockoutConfig and back.config == r.config and back.curve == r.curve


@pytest.mark.parametrize("breakage, message", [
    (lambda f: (f / "config.json").unlink(), "holds no config.json"),
    (lambda f: (f / "config.json").write_text('{"model": '), "config.json is not valid JSON"),
    (lambda f: (f / "config.json").write_text("[1, 2]"), "holds a list, not the JSON object of a TransferConfig"),
    (lambda f: (f / "config.json").write_text('{"n_key_heads": "many"}'),  # its range is declared: checked on load
     "is not a valid TransferConfig: --n-key-heads many: 'many' is not a number"),
    (lambda f: (f / "config.json").write_text('{"n_key_heads": -1}'), "--n-key-heads -1: must be at least 1"),
    (lambda f: (f / "data.json").unlink(), "holds an incomplete transfer result: .*data.json not found"),
    (lambda f: (f / "data.json").write_text('{"results": {}}'), "files lack what this version reads"),
    (lambda f: (f / MARKER).write_text("{"), "circuits.json is not valid JSON"),
    (lambda f: (f / MARKER).unlink(), "holds no circuits result"),
    (lambda f: write_json(f / MARKER, {"kind": "transfer", "version": "1.0"}), "version '1.0' is not a whole number"),
])
def test_a_broken_folder_is_one_result_error(results, tmp_path, breakage, message):
    out = results["transfer"].save(tmp_path / "t")
    breakage(out)
    for load in (TransferResult.load, load_result):
        with pytest.raises(ResultError, match=message) as err:
            load(out)
        assert "\n" not in str(err.value) and str(out) in str(err.value)


def test_an_invalid_config_names_the_class(results, tmp_path):
    out = results["identify"].save(tmp_path / "i")
    write_json(out / "config.json", {**results["identify"].config.to_json(), "mode": "causal"})
    with pytest.raises(ResultError, match=r"config.json is not a valid IdentifyConfig: Unknown mode 'causal'"):
        load_result(out)


@pytest.mark.parametrize("kind", ["identify", "screen", "positions", "neurons", "edges"])
def test_a_truncated_tensor_file_is_one_result_error(results, tmp_path, kind):
    out = results[kind].save(tmp_path / kind)
    path = out / main_file(kind)
    path.write_bytes(path.read_bytes()[: 200])
    with pytest.raises(ResultError, match=rf"{main_file(kind)} cannot be read as a .* file .*truncated"):
        load_result(out)


def test_evaluation_json_file_round_trip_and_errors(results, tmp_path):
    r = results["evaluate"]
    path = r.save(tmp_path / "eval.json")
    assert EvalResult.load(path) == r and type(EvalResult.load(path).config) is type(r.config)
    write_json(path, {**r.to_json(), "config": ["x"]})
    with pytest.raises(ResultError, match="eval.json holds no config of the evaluation"):
        EvalResult.load(path)
    path.write_text('{"tasks": ')
    with pytest.raises(ResultError, match="eval.json is not valid JSON"):
        EvalResult.load(path)


def test_result_marker_and_dispatch(results, tmp_path):
    out = results["transfer"].save(tmp_path / "t")
    assert detect_kind(out) == "transfer" and detect_kind(tmp_path / "missing") is None
    (tmp_path / "plain").mkdir()
    write_json(tmp_path / "plain" / "data.json", {"results": {}, "key_heads": []})  # a result's files, no marker
    assert detect_kind(tmp_path / "plain") is None
    with pytest.raises(ResultError, match="holds no circuits result"):
        load_result(tmp_path / "plain")


def test_wrong_kind_newer_version_and_empty_folders(results, tmp_path):
    out = results["transfer"].save(tmp_path / "t")
    with pytest.raises(ResultError, match="holds a transfer result, not knockout"):
        KnockoutResult.load(out)
    write_json(out / MARKER, {"kind": "transfer", "version": 99})
    with pytest.raises(ResultError, match="newer circuits"):
        load_result(out)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultError, match="holds no circuits result"):
        load_result(tmp_path / "empty")
    with pytest.raises(ResultError, match="Unknown result kind"):
        result_type("nope")


def test_every_kind_names_an_importable_class():
    for kind in RESULT_TYPES:
        assert result_type(kind).kind == kind


def test_pairs_from_reads_an_identify_result_through_its_load(results, tmp_path):
    """``--pairs-from``: the pairs and pair statistics of the saved result as its ``load`` reads them (no guessed
    ``summary.json`` keys); another model's result, or a folder that holds no result, is one line."""
    from circuits.data.source import read_saved_pairs

    r = results["identify"]
    folder = r.save(tmp_path / "identify")
    pairs, stats = read_saved_pairs(folder, r.config.model)
    assert [p.to_json() for p in pairs] == [p.to_json() for p in r.pairs] and len(pairs) > 0
    assert stats == r.pair_stats
    with pytest.raises(ValueError, match="was made with model"):
        read_saved_pairs(folder, "another-model")
    (folder / MARKER).unlink()
    with pytest.raises(ValueError, match=f"--pairs-from {folder}"):
        read_saved_pairs(folder)
