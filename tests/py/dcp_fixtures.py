"""Writes the DCP fixtures for tests/test_dcp.cpp into OUTDIR.

Usage: dcp_fixtures.py OUTDIR

Each case is a checkpoint directory written by dcp_writer (chunks by the real torch.save, the
metadata by the real pickle of classes named as torch's), some then damaged by hand.

Outputs:
    manifest.json   {"valid": {case: {"dir", "tensors": [{"name", "dtype", "shape", "offset",
                                                            "nbytes"}]}},
                     "refused": {case: {"dir", "says"}}}
                    valid cases list their tensors in the order the reader must return them
                    (the metadata's order) with their bytes in <case>.bin; a refused case names
                    a phrase its one-line message must hold
    <case>/         the checkpoint
    <case>.bin      each tensor's raw bytes as torch holds them, concatenated

Exits 3 naming the module when torch or numpy cannot be imported, so the caller can skip.
"""
import json
import os
import pickle
import sys

try:
    import numpy  # noqa: F401  (tensor_bits needs it)
    import torch
except ImportError as e:  # the C++ test turns this line into a GTEST_SKIP
    print(f"missing module: {e.name}", file=sys.stderr)
    sys.exit(3)

import dcp_writer  # noqa: E402  (after the module check)
from tensor_bits import raw_bytes  # noqa: E402

DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32",
               torch.float64: "float64", torch.int64: "int64", torch.int32: "int32",
               torch.uint8: "uint8"}


class Thing:
    """A class a DCP metadata never holds."""


Thing.__module__ = "evil"
Thing.__qualname__ = "Thing"
dcp_writer._module("evil").Thing = Thing


def rewrite(directory, meta):
    with open(os.path.join(directory, ".metadata"), "wb") as f:
        pickle.dump(meta, f, protocol=4)


def index_of(meta, fqn, chunk):
    for k in meta.storage_data:
        if k.fqn == fqn and k.index == chunk:
            return k
    raise KeyError((fqn, chunk))


def main(out):
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(5)
    manifest = {"valid": {}, "refused": {}}

    def valid(case, tensors, shards=None):
        d = os.path.join(out, case)
        dcp_writer.write_dcp(d, tensors, shards)
        entries, blob = [], b""
        for name, t in tensors:
            b = raw_bytes(t)
            entries.append({"name": name, "dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                            "offset": len(blob), "nbytes": len(b)})
            blob += b
        with open(os.path.join(out, case + ".bin"), "wb") as f:
            f.write(blob)
        manifest["valid"][case] = {"dir": case, "tensors": entries}

    def refused(case, says):
        manifest["refused"][case] = {"dir": case, "says": says}

    mixed = [("model.tok_embeddings.weight", torch.randn(6, 4, generator=g)),
             ("model.norm.weight", torch.randn(4, generator=g).to(torch.bfloat16)),
             ("scale", torch.randn((), generator=g, dtype=torch.float64)),
             ("counts", torch.arange(5, dtype=torch.int64)),
             ("half", torch.randn(2, 3, generator=g).to(torch.float16))]
    valid("whole", mixed)
    # A tensor in three chunks along dim 0 over two data files (uneven: 3, 2, 2 rows), one in
    # two, and one whole between them.
    sharded = [("w", torch.randn(7, 3, generator=g)),
               ("b", torch.randn(4, generator=g).to(torch.bfloat16)),
               ("v", torch.randn(5, 2, 2, generator=g, dtype=torch.float64))]
    valid("sharded", sharded, {"w": 3, "v": 2})

    pair = [("p", torch.randn(6, 2, generator=g))]

    d = os.path.join(out, "no_metadata")
    dcp_writer.write_dcp(d, pair)
    os.remove(os.path.join(d, ".metadata"))
    refused("no_metadata", "holds no .metadata file")

    d = os.path.join(out, "truncated")
    dcp_writer.write_dcp(d, pair, {"p": 2})
    path = os.path.join(d, "__1_0.distcp")
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    refused("truncated", "the file is truncated or the metadata damaged")

    d = os.path.join(out, "past_its_file")
    meta = dcp_writer.write_dcp(d, pair, {"p": 2})
    info = meta.storage_data[index_of(meta, "p", 0)]
    info.offset = os.path.getsize(os.path.join(d, info.relative_path)) + 64
    rewrite(d, meta)
    refused("past_its_file", "the file is truncated or the metadata damaged")

    d = os.path.join(out, "unknown_class")
    dcp_writer.write_dcp(d, pair, extra=Thing())
    refused("unknown_class", "names the global evil.Thing, which this reader never builds")

    d = os.path.join(out, "overlap")
    meta = dcp_writer.write_dcp(d, pair, {"p": 2})
    key = index_of(meta, "p", 1)
    info = meta.storage_data.pop(key)
    meta.storage_data[dcp_writer.MetadataIndex("p", [2, 0], 1)] = info
    meta.state_dict_metadata["p"].chunks[1].offsets = torch.Size([2, 0])
    rewrite(d, meta)
    refused("overlap", "the chunks of 'p' overlap")

    d = os.path.join(out, "gap")
    meta = dcp_writer.write_dcp(d, pair, {"p": 2})
    del meta.state_dict_metadata["p"].chunks[1]
    rewrite(d, meta)
    refused("gap", "cover 6 of its 12 elements")

    d = os.path.join(out, "outside")
    meta = dcp_writer.write_dcp(d, pair, {"p": 2})
    meta.state_dict_metadata["p"].chunks[1].offsets = torch.Size([4, 0])
    rewrite(d, meta)
    refused("outside", "outside its size (6, 2)")

    d = os.path.join(out, "wrong_chunk")
    meta = dcp_writer.write_dcp(d, [("p", torch.randn(6, 2, generator=g)),
                                    ("q", torch.randn(3, generator=g))])
    meta.storage_data[index_of(meta, "p", 0)] = meta.storage_data[index_of(meta, "q", 0)]
    rewrite(d, meta)
    refused("wrong_chunk", "not the float32 (6, 2) the metadata lists")

    d = os.path.join(out, "escape")
    meta = dcp_writer.write_dcp(d, pair)
    meta.storage_data[index_of(meta, "p", 0)].relative_path = "../__0_0.distcp"
    rewrite(d, meta)
    refused("escape", "not a file of the checkpoint's directory")

    d = os.path.join(out, "complex")
    dcp_writer.write_dcp(d, [("c", torch.zeros(2, dtype=torch.complex64))])
    refused("complex", "has dtype complex64, which this reader does not read")

    d = os.path.join(out, "damaged_archive")
    meta = dcp_writer.write_dcp(d, pair)
    info = meta.storage_data[index_of(meta, "p", 0)]
    with open(os.path.join(d, info.relative_path), "r+b") as f:
        f.seek(info.offset)
        f.write(b"\0" * 4)  # the archive's first local header signature
    refused("damaged_archive", "__0_0.distcp at byte 0")

    d = os.path.join(out, "not_a_pickle")
    dcp_writer.write_dcp(d, pair)
    with open(os.path.join(d, ".metadata"), "wb") as f:
        f.write(b"\x80\x04not a pickle at all")
    refused("not_a_pickle", ".metadata cannot be read at byte")

    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
