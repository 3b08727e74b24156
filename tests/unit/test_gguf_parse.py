"""The one-time conversion of a GGUF source made cheaper (issue 44's demo `load` stage): the file parsed once
(:func:`circuits.models.sources.parsed_once`), no random initialisation before the weights are assigned, and
TransformerLens's processed weights loaded in one call (:func:`circuits.models.loading._build`). Each gives what the
plain path gives, compared here tensor for tensor on a tiny GGUF written by the gguf package's own writer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

gguf = pytest.importorskip("gguf")


def write_tiny_gguf(path: Path, n_layers: int = 2, d: int = 16, heads: int = 4, kv: int = 2, ff: int = 32) -> Path:
    """A random Llama GGUF (grouped-query attention, tied embeddings, a byte-level BPE vocabulary with one merge)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(n_layers)
    w.add_context_length(64)
    w.add_embedding_length(d)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    tokens = [*bytes_to_unicode().values(), "Ġ1", "<|endoftext|>"]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * (len(tokens) - 1) + [3])
    w.add_token_merges(["Ġ 1"])
    w.add_bos_token_id(len(tokens) - 1)
    w.add_eos_token_id(len(tokens) - 1)
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int):
        return torch.randn(*shape, generator=g).numpy()

    w.add_tensor("token_embd.weight", rand(len(tokens), d))
    w.add_tensor("output_norm.weight", 1 + 0.1 * rand(d))
    for i in range(n_layers):
        for name in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{name}.weight", 1 + 0.1 * rand(d))
        for name, shape in (("attn_q", (d, d)), ("attn_k", (d // heads * kv, d)), ("attn_v", (d // heads * kv, d)),
                            ("attn_output", (d, d)), ("ffn_gate", (ff, d)), ("ffn_up", (ff, d)), ("ffn_down", (d, ff))):
            w.add_tensor(f"blk.{i}.{name}.weight", rand(*shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_read_gguf_equals_transformers_own_reading(tiny_gguf):
    """Parameters, buffers (rotary tables), the tied unembedding, the tokenizer and the logits of ``read_gguf`` are
    transformers' own reading of the file, with no shared reader, name map or metadata and a randomly initialised copy:
    the old path."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from circuits.models.sources import read_gguf

    model, tokenizer = read_gguf(tiny_gguf)
    ref = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name, dtype=torch.float32).eval()
    ref_tok = AutoTokenizer.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    for get in ("named_parameters", "named_buffers"):
        got, want = (dict(getattr(m, get)(remove_duplicate=False)) for m in (model, ref))
        assert got.keys() == want.keys() and got
        assert all(torch.equal(got[k], want[k]) for k in want), get
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied after the assignment
    assert tokenizer.get_vocab() == ref_tok.get_vocab()
    ids = torch.tensor([tokenizer(" 1 + 1 = ").input_ids])
    assert ids.shape[1] > 3 and ids[0, 0] != ids[0, 1]
    assert torch.equal(model(ids).logits, ref(ids).logits)
    assert not hasattr(model.config, "quantization_config")  # a plain model: it saves


def test_one_reader_per_file_and_the_names_restored(tiny_gguf, monkeypatch):
    """transformers opens the file three times for a model and its tokenizer; within ``parsed_once`` the reader is
    built once, and gguf's and transformers' names are their own again afterwards, also after an error."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers import modeling_gguf_pytorch_utils as gguf_loading

    from circuits.models.sources import parsed_once

    built: list[str] = []

    class Counting(gguf.GGUFReader):
        def __init__(self, path, mode="r"):
            built.append(str(path))
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    names = (gguf.GGUFReader, gguf.get_tensor_name_map, gguf_loading.load_gguf_checkpoint)
    AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name, dtype=torch.float32)
    AutoTokenizer.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    without = len(built)
    built.clear()
    with parsed_once():
        AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name, dtype=torch.float32)
        AutoTokenizer.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
        inside = len(built)
        assert gguf.GGUFReader(tiny_gguf, "r+") is not gguf.GGUFReader(tiny_gguf, "r+")  # writable: never shared
    assert without >= 2 and inside == 1
    with pytest.raises(RuntimeError, match="inside"), parsed_once():
        raise RuntimeError("inside")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map, gguf_loading.load_gguf_checkpoint) == names


def test_one_reader_reads_what_the_mapped_one_reads(tiny_gguf):
    """The reader inside ``parsed_once`` slices a plain view of the mapped file: every field and tensor has the same
    values as gguf's own reader's."""
    import numpy as np

    from circuits.models.sources import parsed_once

    plain = gguf.GGUFReader(tiny_gguf)
    with parsed_once():
        shared = gguf.GGUFReader(tiny_gguf)
    assert type(shared.data) is np.ndarray and type(plain.data) is np.memmap
    assert list(shared.fields) == list(plain.fields)
    for name, field in plain.fields.items():
        assert all(np.array_equal(a, b) for a, b in zip(shared.fields[name].parts, field.parts, strict=True)), name
    assert [t.name for t in shared.tensors] == [t.name for t in plain.tensors]
    assert all(np.array_equal(a.data, b.data) for a, b in zip(shared.tensors, plain.tensors))


def test_processed_weights_loaded_in_one_call_equal_transformer_lens_own_loading():
    """``_build`` loads TransformerLens's processed (folded) weights in one ``load_state_dict`` call; its own
    ``load_and_process_state_dict`` loads them one key at a time: the same tensors, and the same modules (the folded
    norms replaced)."""
    pytest.importorskip("transformer_lens.HookedTransformer")
    from transformers import AutoModelForCausalLM

    from circuits.models import loading
    from tests.helpers import tiny_dir

    path = tiny_dir("llama")
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    hf_cfg = loading.read_hf_config(path)
    state = loading.convert_hf_weights(hf, loading.tl_config_from_hf(hf_cfg, torch.float32, "cpu"), path)
    tokenizer = loading.load_tokenizer(path)
    for fold in (True, False):
        ours = loading._build(loading.tl_config_from_hf(hf_cfg, torch.float32, "cpu"), dict(state), tokenizer, fold)
        from transformer_lens import HookedTransformer

        theirs = HookedTransformer(loading.tl_config_from_hf(hf_cfg, torch.float32, "cpu"), tokenizer=None,
                                   move_to_device=True)
        theirs.load_and_process_state_dict(dict(state), fold_ln=fold, center_writing_weights=False,
                                           center_unembed=False, fold_value_biases=False,
                                           refactor_factored_attn_matrices=False)
        a, b = ours.state_dict(), theirs.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), fold
        assert [type(m).__name__ for m in ours.modules()] == [type(m).__name__ for m in theirs.modules()]
        assert "load_state_dict" not in vars(ours)  # the method is the class's again


def test_cache_keyed_by_the_files_bytes_and_older_folders_removed(tiny_gguf, tmp_path, monkeypatch):
    """The conversion cache of a GGUF file is keyed by its bytes: the same file installed in two environments (two
    paths) shares one folder, a file of other bytes gets another. Writing it removes the folders that an older format
    wrote for that stem (keyed by path: one 1.2 GB folder per fresh clone filled CI's disk), and nothing else."""
    import hashlib
    import json
    import os
    import shutil

    from circuits.models import sources

    monkeypatch.setenv("CIRCUITS_CACHE", str(tmp_path / "cache"))
    copy = tmp_path / "env2" / tiny_gguf.name
    copy.parent.mkdir()
    shutil.copy(tiny_gguf, copy)
    other = tmp_path / "env3" / tiny_gguf.name
    other.parent.mkdir()
    other.write_bytes(tiny_gguf.read_bytes() + b"\0")
    assert sources.file_digest(tiny_gguf) == hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    assert sources.gguf_cache_dir(copy) == sources.gguf_cache_dir(tiny_gguf) != sources.gguf_cache_dir(other)

    # a digest is remembered per (path, size, modification time): read again, not hashed again; a touched file is
    # hashed again
    monkeypatch.setenv("CIRCUITS_CACHE", str(tmp_path / "memo"))
    digest = sources.file_digest(copy)
    (memo,) = (tmp_path / "memo" / "digests").iterdir()  # this file's only
    assert memo.read_text() == digest
    memo.write_text("f" * 64)
    assert sources.file_digest(copy) == "f" * 64
    os.utime(copy, ns=(copy.stat().st_atime_ns, copy.stat().st_mtime_ns + 1))
    assert sources.file_digest(copy) == digest
    monkeypatch.setenv("CIRCUITS_CACHE", str(tmp_path / "cache"))

    root, stem = tmp_path / "cache", tiny_gguf.stem
    old = root / f"{stem}-0123456789abcdef"
    old_tokenizer = root / f"{stem}-0123456789abcdef-tokenizer"
    unmarked = root / f"{stem}-fedcba9876543210"  # no source.json: not known to be ours
    newer = root / f"{stem}-1111111111111111"  # the current format, of other bytes
    foreign = root / f"{stem}-mine"  # a name this module never writes
    other_stem = root / "other-0123456789abcdef"
    for folder in (old, old_tokenizer, unmarked, newer, foreign, other_stem):
        folder.mkdir(parents=True)
        (folder / "weights").write_bytes(b"x" * 10)
    (old / "source.json").write_text(json.dumps({"format": 2}))
    (other_stem / "source.json").write_text(json.dumps({"format": 2}))
    (newer / "source.json").write_text(json.dumps({"format": sources.CACHE_FORMAT}))
    linked = root / f"{stem}-2222222222222222"  # a link of the name, to a folder that is not the cache's
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "source.json").write_text(json.dumps({"format": 1}))
    linked.symlink_to(mine)
    with pytest.warns(UserWarning, match=r"removed 2 cache folder\(s\) of an older format for tiny.gguf"):
        cache = sources.gguf_cache(copy)
    assert (cache / "done").is_file() and json.loads((cache / "source.json").read_text())["sha256"]
    assert not old.exists() and not old_tokenizer.exists()
    assert all(f.is_dir() for f in (unmarked, newer, foreign, other_stem))
    assert linked.is_symlink() and (mine / "source.json").is_file()  # neither removed nor counted
    assert sources.gguf_cache(tiny_gguf) == cache  # the other environment's file: the same folder, nothing removed
