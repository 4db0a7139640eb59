"""A writer of torch.distributed.checkpoint (DCP) directories, for the tests of parity's reader.

Debian's torch (1.13) has no torch.distributed.checkpoint, so this module writes the format as
torch 2.x's FileSystemWriter does, from its definition (torch/distributed/checkpoint/metadata.py
and filesystem.py): each tensor chunk is a complete archive written by the real torch.save into
a data file __R_0.distcp, and .metadata is the real pickle of stand-in classes that carry the
module and class names torch's dataclasses have and pickle the same way (a NEWOBJ, then a BUILD
of the attribute dict; TensorProperties with its state tuple; the memory-format enum by value).
torch.Size, the dtypes and the layout pickle through the real torch.

    write_dcp(directory, tensors, shards=None, extra=None)
        tensors: list of (key, tensor), in state-dict order; shards: {key: n} splits that tensor
        into n chunks along dim 0, chunk i saved by rank i % 2 (so into two data files); extra:
        objects added to the metadata's storage_meta (to plant a foreign class).
"""
import dataclasses
import enum
import io
import os
import pathlib
import pickle
import sys
import types
import uuid

import torch

META = "torch.distributed.checkpoint.metadata"
FILESYSTEM = "torch.distributed.checkpoint.filesystem"


def _module(name):
    """A module object under `name` in sys.modules, so that pickle finds the classes there."""
    if name not in sys.modules:
        sys.modules[name] = types.ModuleType(name)
    return sys.modules[name]


def _register(cls, module):
    cls.__module__ = module
    cls.__qualname__ = cls.__name__
    setattr(_module(module), cls.__name__, cls)
    return cls


class _MEM_FORMAT_ENCODING(enum.Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


_register(_MEM_FORMAT_ENCODING, META)


@dataclasses.dataclass
class ChunkStorageMetadata:
    offsets: torch.Size
    sizes: torch.Size


@dataclasses.dataclass
class TensorProperties:
    dtype: torch.dtype
    layout: torch.layout = torch.strided
    requires_grad: bool = False
    memory_format: object = None
    pin_memory: bool = False

    def __getstate__(self):
        return (self.dtype, self.layout, self.requires_grad,
                _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, self.pin_memory)

    def __setstate__(self, state):
        raise NotImplementedError("written only")


@dataclasses.dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: torch.Size
    chunks: list


@dataclasses.dataclass
class BytesStorageMetadata:
    pass


@dataclasses.dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: object = None
    index: object = dataclasses.field(hash=False, compare=False, default=None)

    def __init__(self, fqn, offset=None, index=None):
        # Attribute order fqn, index, offset, as torch's own __init__ sets them.
        object.__setattr__(self, "fqn", fqn)
        object.__setattr__(self, "index", index)
        if offset is not None:
            object.__setattr__(self, "offset", torch.Size(offset))


@dataclasses.dataclass
class StorageMeta:
    checkpoint_id: object = None
    save_id: object = None
    load_id: object = None
    modules: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: object = None
    storage_data: object = None
    storage_meta: object = None
    version: object = None


@dataclasses.dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int


for _cls in (ChunkStorageMetadata, TensorProperties, TensorStorageMetadata,
             BytesStorageMetadata, MetadataIndex, StorageMeta, Metadata):
    _register(_cls, META)
_register(_StorageInfo, FILESYSTEM)


def _chunks(t, n):
    """(offsets, the chunk tensor) pairs of t split into n pieces along dim 0."""
    out, start = [], 0
    for piece in torch.tensor_split(t, n, dim=0) if n > 1 else [t]:
        offsets = [start] + [0] * (t.dim() - 1) if t.dim() else []
        out.append((offsets, piece.contiguous().clone()))
        start += piece.shape[0] if t.dim() else 0
    return out


def write_dcp(directory, tensors, shards=None, extra=None):
    """Writes `tensors` as a DCP checkpoint in `directory` (created); returns the Metadata."""
    shards = shards or {}
    os.makedirs(directory, exist_ok=True)
    files = {0: io.BytesIO(), 1: io.BytesIO()}
    state_dict_metadata, storage_data, planner_data = {}, {}, {}
    for key, t in tensors:
        chunk_meta = []
        for index, (offsets, piece) in enumerate(_chunks(t, shards.get(key, 1))):
            rank = index % 2
            buf = files[rank]
            start = buf.tell()
            torch.save(piece, buf)
            storage_data[MetadataIndex(key, offsets, index)] = _StorageInfo(
                f"__{rank}_0.distcp", start, buf.tell() - start)
            chunk_meta.append(ChunkStorageMetadata(torch.Size(offsets), torch.Size(piece.shape)))
        state_dict_metadata[key] = TensorStorageMetadata(
            TensorProperties(t.dtype), torch.Size(t.shape), chunk_meta)
        planner_data[key] = (key,)
    # A non-tensor entry, as a train state's step is: bytes in the data file, no offset.
    step = io.BytesIO()
    torch.save(7, step)
    start = files[0].tell()
    files[0].write(step.getvalue())
    state_dict_metadata["train_state.step"] = BytesStorageMetadata()
    storage_data[MetadataIndex("train_state.step")] = _StorageInfo(
        "__0_0.distcp", start, len(step.getvalue()))
    planner_data["train_state.step"] = ("train_state", "step")
    storage_meta = StorageMeta(pathlib.PurePosixPath(directory), str(uuid.UUID(int=1)), None, [])
    if extra is not None:
        storage_meta.modules = [extra]
    meta = Metadata(state_dict_metadata, planner_data, storage_data, storage_meta, "1.0.0")
    for rank, buf in files.items():
        with open(os.path.join(directory, f"__{rank}_0.distcp"), "wb") as f:
            f.write(buf.getvalue())
    with open(os.path.join(directory, ".metadata"), "wb") as f:
        pickle.dump(meta, f, protocol=4)
    return meta
