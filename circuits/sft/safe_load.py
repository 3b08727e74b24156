"""Reading fine-tuning checkpoints without running code from them.

A run folder may come from someone else (a shared drive, an archive), so nothing in it is unpickled freely:

- ``checkpoint.pt`` (one process, or Precise SFT on several) is read with ``torch.load(weights_only=True)``
  (:func:`load_checkpoint_file`): tensors, numbers, strings, lists and dicts only; anything else is one error naming
  the file, and its code never runs. Its config is compared with the run's before any of it is used.
- A sharded ``checkpoint/`` folder (FSDP, ``torch.distributed.checkpoint``) keeps a pickled ``.metadata`` file and
  pickles the state's non-tensor values; ``torch.distributed.checkpoint.load`` unpickles both with plain
  ``pickle``. :func:`dcp_load` reads them instead with an unpickler that admits only the checkpoint format's own
  record classes and torch's dtypes (:class:`MetadataUnpickler`), and the values with ``weights_only=True``.
"""

from __future__ import annotations

import io
import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from circuits.io import load_torch

# The classes a DCP ``.metadata`` pickle is made of (torch 2.4 - 2.13); nothing else is looked up while reading it.
_DCP_CLASSES = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
        "StorageMeta", "MetadataIndex", "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.distributed.checkpoint.planner": {"LoadItemType", "WriteItemType"},
    "torch": {"Size"},
    "torch.serialization": {"_get_layout"},  # a layout by its name (also in torch's weights_only allowlist)
    "pathlib": {"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},  # storage_meta.checkpoint_id
    "collections": {"OrderedDict"},
    "builtins": {"set", "frozenset", "tuple", "list", "dict", "slice"},
}


class MetadataUnpickler(pickle.Unpickler):
    """Unpickles a DCP ``.metadata`` file, refusing every global but the format's own records and torch's dtypes
    and layouts (so a crafted file cannot call ``os.system`` or any other function)."""

    def find_class(self, module: str, name: str) -> Any:
        if name in _DCP_CLASSES.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.layout, torch.memory_format)):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint's metadata")


def load_checkpoint_file(path: Path) -> dict:
    """``checkpoint.pt`` as written by :meth:`circuits.sft.parallel.Local.save_checkpoint`, read without running
    code (``weights_only``); a file of anything else is one error naming it."""
    try:
        with warnings.catch_warnings():  # torch warns of a foreign pickle protocol before refusing it
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL ([\w.]+)", str(err))
        what = f" ({found.group(1)})" if found else ""
        raise ValueError(f"{path} cannot be read as a fine-tuning checkpoint: it holds Python objects{what} that a "
                         "checkpoint circuits wrote does not, so it was not loaded (loading it could run code). Use "
                         "another --out, or delete it if you do not trust where it came from") from None
    except Exception:
        ckpt = load_torch(path, "fine-tuning checkpoint")  # truncated or foreign: its one-line error
    keys = {"step", "losses", "config", "delta", "optimizer"}
    if not isinstance(ckpt, dict) or not keys <= set(ckpt) or not isinstance(ckpt["config"], dict):
        raise ValueError(f"{path} is not a circuits fine-tuning checkpoint (it lacks {', '.join(sorted(keys))}); use "
                         "another --out or delete it")
    return ckpt


def dcp_reader(path: str | Path) -> Any:
    """A ``FileSystemReader`` for the DCP folder ``path`` whose metadata is read with :class:`MetadataUnpickler`."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            file = self._get_metadata_path(kwargs.get("rank"))
            with self.fs.create_stream(file, "rb") as f:
                try:
                    metadata = MetadataUnpickler(f).load()
                except Exception as err:
                    raise ValueError(f"{file} cannot be read as checkpoint metadata ({type(err).__name__}: {err}); it "
                                     "may be truncated or written by something else") from None
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(str(path))


def dcp_planner() -> Any:
    """The default load planner, but the state's non-tensor values are read with ``weights_only=True``."""
    from torch.distributed.checkpoint import DefaultLoadPlanner
    from torch.distributed.checkpoint._traverse import set_element

    class SafePlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            obj = torch.load(value, weights_only=True)
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
            else:
                self.state_dict[read_item.dest_index.fqn] = obj

    return SafePlanner()


def dcp_load(state: dict, path: str | Path) -> None:
    """``torch.distributed.checkpoint.load(state, path)`` without unpickling anything but the format's records."""
    import torch.distributed.checkpoint as dcp

    reader = dcp_reader(path)
    reader.read_metadata()  # first here, so a foreign or crafted file is one error, not one per rank
    dcp.load(state, storage_reader=reader, planner=dcp_planner())
