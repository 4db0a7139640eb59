"""Writes the torch.save fixtures for tests/test_torch_save.cpp into OUTDIR.

Usage: torch_save_fixtures.py OUTDIR

Every file is written by the real torch.save (fixed seed), or is a torch.save archive whose zip
container or data.pkl was rewritten here by hand to reach a corner the writer does not take
(zip64 extra fields, a byteorder entry, rarer pickle opcodes); each such file is loaded back with
torch.load and compared with what was meant, so it is known to be one torch itself reads.

Outputs:
    manifest.json   {"torch": version, "numpy": version,
                     "valid": {case: {"file", "tensors": [{"name", "dtype", "shape", "offset",
                                                           "nbytes"}]}},
                     "refused": {case: file}, "hostile_read": {case: file}}
                    valid cases list their tensors in the order the reader must return them
                    (dict insertion order, depth first; names join keys with '.' and number list
                    and tuple items); offset/nbytes index <case>.bin; "hostile_read" lists
                    hand-made files a linear-time reader reads (to {"t": tensor})
    <case>.pt       the file
    <case>.bin      each tensor's raw bytes as torch holds them
                    (t.contiguous().view(same-size int dtype).numpy().tobytes()), concatenated

Exits 3 naming the module when torch or numpy cannot be imported, so the caller can skip.
"""

import collections
import io
import json
import os
import pickle
import struct
import sys
import zipfile
import zlib

try:
    import numpy as np
    import torch
except ImportError as e:  # the C++ test turns this line into a GTEST_SKIP
    print(f"missing module: {e.name}", file=sys.stderr)
    sys.exit(3)

from tensor_bits import from_bits, raw_bytes  # noqa: E402  (after the module check)

# The reader's dtype name (h5::dtype_name), and the same-size integer dtype whose view gives
# torch's bytes.
DTYPES = {
    torch.bfloat16: ("bfloat16", torch.int16),
    torch.float16: ("float16", torch.int16),
    torch.float32: ("float32", torch.int32),
    torch.float64: ("float64", torch.int64),
    torch.int64: ("int64", torch.int64),
    torch.int32: ("int32", torch.int32),
    torch.uint8: ("uint8", torch.uint8),
}




def flatten(obj, prefix, out):
    """The reader's naming rule, applied by Python to what torch.load returns."""
    if isinstance(obj, torch.Tensor):
        out.append((prefix, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            key = str(k)
            flatten(v, key if prefix is None else prefix + "." + key, out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flatten(v, str(i) if prefix is None else prefix + "." + str(i), out)
    elif obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        pass
    else:
        raise TypeError(f"fixture holds an object the reader refuses: {type(obj)}")


def expect(outdir, case, path):
    """Loads `path` with torch and records what the reader must return."""
    obj = torch.load(path)
    found = []
    flatten(obj, None, found)
    tensors, blob = [], bytearray()
    for name, t in found:
        b = raw_bytes(t)
        tensors.append({"name": name, "dtype": DTYPES[t.dtype][0], "shape": list(t.shape),
                        "offset": len(blob), "nbytes": len(b)})
        blob += b
    with open(os.path.join(outdir, case + ".bin"), "wb") as f:
        f.write(bytes(blob))
    return {"file": os.path.basename(path), "tensors": tensors}


def same_tensors(a, b):
    fa, fb = [], []
    flatten(a, None, fa)
    flatten(b, None, fb)
    assert [n for n, _ in fa] == [n for n, _ in fb], "names differ"
    for (n, x), (_, y) in zip(fa, fb):
        assert x.dtype == y.dtype and x.shape == y.shape, n
        assert raw_bytes(x) == raw_bytes(y), n


# ---------------------------------------------------------------------------------------------
# A zip writer for the rewritten archives. Layout (APPNOTE 6.3): per entry a local header
# (30 bytes + name + extra) then the stored data; the central directory (46 bytes + name + extra
# per entry); with zip64 a zip64 end-of-central-directory record (56 bytes) and its locator
# (20 bytes); then the end-of-central-directory record (22 bytes).

def write_zip(path, entries, zip64=False, zero_crc=()):
    """entries: [(name, bytes)], stored. zip64: every size and offset in the zip64 extra field
    (0xFFFFFFFF in the 32-bit fields) and 0xFFFF/0xFFFFFFFF sentinels in the EOCD record.
    zero_crc: names whose CRC-32 is recorded as 0 (as a writer with CRC-32s off records it)."""
    out, central = bytearray(), bytearray()
    version = 45 if zip64 else 20
    for name, data in entries:
        n = name.encode()
        crc = 0 if name in zero_crc else zlib.crc32(data)
        offset = len(out)
        size32 = 0xFFFFFFFF if zip64 else len(data)
        local_extra = struct.pack("<HHQQ", 1, 16, len(data), len(data)) if zip64 else b""
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, version, 0x0800, 0, 0, 0x21, crc,
                           size32, size32, len(n), len(local_extra)) + n + local_extra + data
        central_extra = (struct.pack("<HHQQQ", 1, 24, len(data), len(data), offset)
                         if zip64 else b"")
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, version, version, 0x0800, 0, 0,
                               0x21, crc, size32, size32, len(n), len(central_extra), 0, 0, 0,
                               0, 0xFFFFFFFF if zip64 else offset) + n + central_extra
    cd_offset, cd_size, count = len(out), len(central), len(entries)
    out += central
    if zip64:
        record = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, cd_size,
                           cd_offset)
        out += struct.pack("<IIQI", 0x07064B50, 0, record, 1)
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                           0xFFFFFFFF, 0)
    else:
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, cd_size, cd_offset, 0)
    with open(path, "wb") as f:
        f.write(bytes(out))


def entries_of(path):
    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


# ---------------------------------------------------------------------------------------------
# A hand-assembled data.pkl (protocol 4 framing around opcodes torch's pickler does not emit:
# BINUNICODE8, BINSTRING, SHORT_BINSTRING, LONG4, BININT, BININT2, DICT, LIST, APPEND(S), DUP,
# POP, POP_MARK, LONG_BINPUT/GET, NEWOBJ, BINFLOAT, (SHORT_)BINBYTES, TUPLE3, SETITEM(S)).

def u8(v): return struct.pack("<B", v)
def u16(v): return struct.pack("<H", v)
def i32(v): return struct.pack("<i", v)
def u32(v): return struct.pack("<I", v)
def u64(v): return struct.pack("<Q", v)


def binunicode8(s):
    b = s.encode()
    return b"\x8d" + u64(len(b)) + b


def short_binunicode(s):
    b = s.encode()
    return b"\x8c" + u8(len(b)) + b


def long4(v):
    b = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8b" + i32(len(b)) + b


def long1(v):
    b = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True) if v else b""
    return b"\x8a" + u8(len(b)) + b


def storage_pid(cls, key, numel):
    """( 'storage', torch.<cls>, key, 'cpu', numel ) BINPERSID, with varied string opcodes."""
    return (b"(" + b"U" + u8(7) + b"storage" + b"ctorch\n" + cls.encode() + b"\n" +
            b"T" + i32(len(key)) + key.encode() + short_binunicode("cpu") + long1(numel) +
            b"t" + b"Q")


def handmade_pickle(x_key, y_key):
    """{"x": f32 (2, 3) strides (3, 1) from x_key, "y": Parameter(bf16 (4,)) from y_key,
        "group": {"a": x again, "b": y[1:] strides (1,)}, "list": [x, None, y],
        "meta": (b"ab", b"cd", 1.5, True, 2**70)}"""
    rebuild = b"ctorch._utils\n_rebuild_tensor_v2\n"
    hooks = b"ccollections\nOrderedDict\n" + b")" + b"\x81"  # OrderedDict() through NEWOBJ
    p = b"\x80\x04"
    body = b"(" + binunicode8("x")
    body += rebuild + b"r" + u32(1000) + b"0" + b"j" + u32(1000)  # LONG_BINPUT, POP, LONG_BINGET
    body += b"(" + storage_pid("FloatStorage", x_key, 6) + b"J" + i32(0)
    body += b"M" + u16(2) + b"K\x03" + b"\x86"  # size (2, 3)
    body += long4(3) + b"K\x01" + b"\x86"  # stride (3, 1)
    body += b"\x89" + hooks + b"tR" + b"q\x02"  # x in memo 2
    body += short_binunicode("y")
    body += b"ctorch._utils\n_rebuild_parameter\n"
    body += rebuild + b"(" + storage_pid("BFloat16Storage", y_key, 4) + b"K\x00"
    body += b"K\x04\x85" + b"K\x01\x85" + b"\x89" + hooks + b"tR"
    body += b"\x88" + b"}" + b"\x87" + b"R" + b"q\x03"  # _rebuild_parameter(t, True, {}) in memo 3
    body += short_binunicode("group") + b"}" + b"2" + b"0"  # DUP then POP: one dict stays
    body += short_binunicode("a") + b"h\x02" + b"s"  # SETITEM
    body += b"(" + short_binunicode("b") + rebuild + b"("
    body += storage_pid("BFloat16Storage", y_key, 4) + b"K\x01" + b"K\x03\x85" + b"K\x01\x85"
    body += b"\x89" + hooks + b"tR" + b"u"  # SETITEMS
    body += short_binunicode("list") + b"(" + b"h\x02" + b"l"  # LIST [x]
    body += b"N" + b"a" + b"(" + b"j" + u32(3) + b"e"  # APPEND None, APPENDS [y]
    body += short_binunicode("meta") + b"(" + b"C\x02ab" + b"B" + u32(2) + b"cd"
    body += b"G" + struct.pack(">d", 1.5) + b"\x88" + long4(2 ** 70) + b"t"
    body += b"(" + b"N" + b"N" + b"1"  # MARK None None POP_MARK: nothing stays
    body += b"d" + b"."  # DICT
    return p + b"\x95" + u64(len(body)) + body


def tensor_call(cls, key, numel, offset, size, stride):
    """Pushes _rebuild_tensor_v2(storage(cls, key, numel), offset, size, stride, False, {})."""
    def ints(v):
        return b"(" + b"".join(b"J" + i32(x) for x in v) + b"t"
    return (b"ctorch._utils\n_rebuild_tensor_v2\n" + b"(" + storage_pid(cls, key, numel) +
            b"J" + i32(offset) + ints(size) + ints(stride) + b"\x89" + b"}" + b"tR")


def one_tensor_pickle(cls, key, numel, offset, size, stride):
    """{"t": the tensor above}"""
    return (b"\x80\x02" + b"}" + short_binunicode("t") +
            tensor_call(cls, key, numel, offset, size, stride) + b"s" + b".")


def hostile_pickles():
    """Pickles that cost a naive reader exponential time, quadratic time or unbounded memory,
    each around one float32 storage "0" of 6 elements. Returns {case: (pkl, readable)}."""
    t = tensor_call("FloatStorage", "0", 6, 0, [6], [1]) + b"q\x00"
    head = b"\x80\x02" + b"}" + short_binunicode("t") + t + b"s"
    out = {}
    # 60 levels of L[k+1] = [L[k], L[k]]: 2**60 paths to one tensor.
    dag = head + short_binunicode("dag") + b"(h\x00lq\x010"
    for k in range(1, 61):
        dag += b"(" + b"h" + u8(k) + b"h" + u8(k) + b"l" + b"q" + u8(k + 1) + b"0"
    out["hostile_dag"] = (dag + b"h" + u8(61) + b"s.", False)
    # A list that holds itself.
    out["hostile_cycle"] = (head + short_binunicode("loop") + b"]q\x01h\x01as.", False)
    # 150 tuples, one inside the next.
    out["hostile_deep"] = (head + short_binunicode("deep") + b"h\x00" + b"\x85" * 150 + b"s.",
                           False)
    # A 2**20 x 2**20 view of one element: four terabytes as a contiguous copy.
    out["hostile_expand"] = (head + short_binunicode("big") +
                             tensor_call("FloatStorage", "0", 6, 0, [1 << 20, 1 << 20], [0, 0]) +
                             b"s.", False)
    # A tensor under a 5000-byte key.
    out["hostile_long_name"] = (head + short_binunicode("n") + b"}" + b"X" + u32(5000) +
                                b"k" * 5000 + b"h\x00" + b"s" + b"s.", False)
    # os.system('echo') called and its result popped: nothing of it reaches the tree, but the
    # pickle names a global outside the allow-list, which torch.load(weights_only=True) refuses.
    out["global_popped"] = (head + b"cos\nsystem\n(" + short_binunicode("echo") + b"tR0" + b".",
                            False)
    # 100000 calls of an allowed global the reader never builds (builtins.set) on one
    # 50000-item tuple: linear, not quadratic.
    wide = head + b"cbuiltins\nset\nq\x010" + b"(" + b"K\x01" * 50000 + b"tq\x020"
    wide += b"h\x01h\x02R0" * 100000
    out["hostile_wide_calls"] = (wide + b".", True)
    return out


# ---------------------------------------------------------------------------------------------

def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(20240601)
    valid, refused = {}, {}

    def path(case):
        return os.path.join(outdir, case + ".pt")

    def save_valid(case, obj, **kw):
        torch.save(obj, path(case), **kw)
        same_tensors(obj, torch.load(path(case)))
        valid[case] = expect(outdir, case, path(case))

    def save_refused(case, obj, **kw):
        torch.save(obj, path(case), **kw)
        refused[case] = case + ".pt"

    # (a) every dtype the reader reads, with special values bit for bit.
    f32_bits = [0x7FC00001, 0xFFC12345, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001,
                0x807FFFFF, 0x3F800000]
    f64_bits = [0x7FF8000000000001, 0xFFF0000000000000, 0x7FF0000000000000,
                0x8000000000000000, 0x0000000000000001, 0x3FF0000000000000]
    half_bits = [0x7E01, 0xFC00, 0x7C00, 0x8000, 0x0001, 0x03FF, 0x3C00]
    bf16_bits = [0x7FC1, 0xFF81, 0x7F80, 0xFF80, 0x8000, 0x0001, 0x807F, 0x3F80]
    flat = {
        "bf16": torch.cat([from_bits(bf16_bits, np.uint16, np.int16, torch.bfloat16),
                           torch.randn(24).to(torch.bfloat16)]).view(4, 8),
        "fp16": torch.cat([from_bits(half_bits, np.uint16, np.int16, torch.float16),
                           torch.randn(5).to(torch.float16)]).view(3, 4),
        "fp32": torch.cat([from_bits(f32_bits, np.uint32, np.int32, torch.float32),
                           torch.randn(16)]).view(2, 3, 4),
        "fp64": torch.cat([from_bits(f64_bits, np.uint64, np.int64, torch.float64),
                           torch.randn(4, dtype=torch.float64)]),
        "i64": torch.tensor([-(2 ** 63), 2 ** 63 - 1, 0, -1, 12345678901234], dtype=torch.int64),
        "i32": torch.tensor([-(2 ** 31), 2 ** 31 - 1, 0, -1, 7, 8], dtype=torch.int32).view(2, 3),
        "u8": torch.arange(256, dtype=torch.int64).to(torch.uint8).view(16, 16),
    }
    save_valid("flat", flat)

    # (b) nested groups, with scalars beside them (skipped by the reader).
    save_valid("nested", {
        "grads": {"w": torch.randn(3, 4), "b": torch.randn(4)},
        "params": {"w": torch.randn(3, 4).to(torch.bfloat16), "b": torch.randn(4)},
        "step": 7, "lr": 0.5, "note": "seed 20240601", "none": None, "flag": True,
    })

    # (c) a real nn.Module state_dict(): an OrderedDict with _metadata set through BUILD, and a
    # 0-d int64 buffer (num_batches_tracked).
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3),
                                torch.nn.Linear(3, 2))
    model(torch.randn(5, 4))  # updates the BatchNorm buffers
    sd = model.state_dict()
    assert hasattr(sd, "_metadata")
    save_valid("state_dict", sd)

    # (d) views: each must read as the contiguous copy of what it shows.
    base = torch.randn(4, 6)
    shared = torch.arange(12, dtype=torch.float32)
    save_valid("views", {
        "transposed": base.t(),
        "sliced": base[1:3, 2:5],
        "strided": base[:, ::2],
        "expanded": torch.randn(3, 1).expand(3, 5),
        "shared_a": shared[:6].view(2, 3),
        "shared_b": shared[4:],
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 3),
        "param": torch.nn.Parameter(torch.randn(2, 2)),
        "fp16_t": torch.randn(3, 2).to(torch.float16).t(),
    })

    # (e) lists and tuples, and integer dict keys.
    save_valid("containers", {
        "a": [torch.randn(2), torch.randn(3)],
        "b": (torch.arange(4, dtype=torch.int32), {"c": torch.randn(2, 2)}),
        "d": {1: torch.randn(1), 2: torch.randn(1).to(torch.bfloat16)},
        "e": [[torch.tensor([1, 2], dtype=torch.uint8)], []],
    })

    # (f) pickle protocol 4 (FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL).
    save_valid("proto4", {"w": torch.randn(3, 3), "h": torch.randn(2).to(torch.bfloat16),
                          "inner": {"i": torch.arange(3)}}, pickle_protocol=4)

    # Rewritten archives, each read back by torch.load.
    xy = {"x": torch.randn(2, 3), "y": torch.randn(4).to(torch.bfloat16)}
    torch.save(xy, path("handmade"))
    entries = entries_of(path("handmade"))
    prefix = entries[0][0].rsplit("/", 1)[0]
    data = [n for n, _ in entries if n.startswith(prefix + "/data/")]
    assert len(data) == 2
    x_key, y_key = data[0].rsplit("/", 1)[1], data[1].rsplit("/", 1)[1]
    pkl = handmade_pickle(x_key, y_key)
    write_zip(path("handmade"), [(n, pkl if n.endswith("/data.pkl") else d) for n, d in entries])
    back = torch.load(path("handmade"))
    assert list(back) == ["x", "y", "group", "list", "meta"]
    assert torch.equal(back["x"], xy["x"]) and torch.equal(back["group"]["b"], xy["y"][1:])
    assert isinstance(back["y"], torch.nn.Parameter) and back["meta"][4] == 2 ** 70
    valid["handmade"] = expect(outdir, "handmade", path("handmade"))

    write_zip(path("zip64"), entries_of(path("flat")), zip64=True)
    same_tensors(flat, torch.load(path("zip64")))
    valid["zip64"] = expect(outdir, "zip64", path("zip64"))

    entries = entries_of(path("nested"))
    prefix = entries[0][0].rsplit("/", 1)[0]
    write_zip(path("byteorder_little"), entries + [(prefix + "/byteorder", b"little")])
    valid["byteorder_little"] = expect(outdir, "byteorder_little", path("byteorder_little"))
    write_zip(path("byteorder_big"), entries + [(prefix + "/byteorder", b"big")])
    refused["byteorder_big"] = "byteorder_big.pt"

    # (g) files the reader must refuse.
    save_refused("legacy", {"w": torch.randn(2)}, _use_new_zipfile_serialization=False)
    save_refused("module", {"w": torch.randn(2), "layer": torch.nn.Linear(2, 2)})
    save_refused("numpy", {"w": torch.randn(2), "arr": np.arange(4.0)})
    save_refused("bool", {"w": torch.randn(2), "mask": torch.tensor([True, False])})
    save_refused("int16", {"w16": torch.arange(3, dtype=torch.int16)})
    save_refused("int8", {"w8": torch.arange(3, dtype=torch.int8)})
    save_refused("complex", {"z": torch.randn(2, dtype=torch.complex64)})
    save_refused("dtype_value", {"w": torch.randn(2), "dtype": torch.float32})
    save_refused("top_tensor", torch.randn(3))
    save_refused("top_list", [torch.randn(3)])
    save_refused("no_tensors", {"step": 3, "lr": 0.1})
    save_refused("duplicate", {"a.b": torch.randn(1), "a": {"b": torch.randn(1)}})
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), path("torchscript"))
    refused["torchscript"] = "torchscript.pt"
    with open(path("plain_pickle"), "wb") as f:
        pickle.dump({"w": [1.0, 2.0]}, f, protocol=2)
    refused["plain_pickle"] = "plain_pickle.pt"
    with zipfile.ZipFile(path("deflated"), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in entries_of(path("flat")):
            z.writestr(n, d)
    refused["deflated"] = "deflated.pt"
    flat_bytes = open(path("flat"), "rb").read()
    with open(path("truncated"), "wb") as f:
        f.write(flat_bytes[: len(flat_bytes) // 2])
    refused["truncated"] = "truncated.pt"
    # One storage byte flipped, the CRC-32 left as it was: a damaged file.
    entries = entries_of(path("flat"))
    damaged = bytearray(flat_bytes)
    u8_data = next(d for n, d in entries if n.endswith("/data/" + "6"))
    at = flat_bytes.find(u8_data)
    assert at > 0
    damaged[at + 100] ^= 0x01
    with open(path("crc_mismatch"), "wb") as f:
        f.write(bytes(damaged))
    refused["crc_mismatch"] = "crc_mismatch.pt"
    # The same byte flipped, and that entry's CRC-32 recorded as 0 while every other entry
    # records one: not a writer with CRC-32s off, a damaged (or doctored) file.
    name6 = next(n for n, d in entries if n.endswith("/data/6"))
    flipped = [(n, bytes(damaged[at:at + len(d)]) if n == name6 else d) for n, d in entries]
    write_zip(path("crc_zeroed_one"), flipped, zero_crc={name6})
    refused["crc_zeroed_one"] = "crc_zeroed_one.pt"

    # Hand-made archives around one float32 storage "0" of 6 elements.
    six = torch.arange(6, dtype=torch.float32).numpy().tobytes()

    def archive(case, pkl, storage=six):
        write_zip(path(case), [("archive/data.pkl", pkl), ("archive/data/0", storage),
                               ("archive/version", b"3\n")])
        refused[case] = case + ".pt"

    archive("storage_short", one_tensor_pickle("FloatStorage", "0", 6, 0, [6], [1]), six[:20])
    archive("view_outside", one_tensor_pickle("FloatStorage", "0", 6, 0, [3, 3], [3, 1]))
    archive("offset_outside", one_tensor_pickle("FloatStorage", "0", 6, 4, [3], [1]))
    archive("missing_storage", one_tensor_pickle("FloatStorage", "9", 6, 0, [6], [1]))
    archive("unknown_storage", one_tensor_pickle("FooStorage", "0", 6, 0, [6], [1]))
    archive("negative_size", one_tensor_pickle("FloatStorage", "0", 6, 0, [-1], [1]))
    hostile_read = {}
    for case, (pkl, readable) in hostile_pickles().items():
        archive(case, pkl)
        if readable:
            del refused[case]
            hostile_read[case] = case + ".pt"
    write_zip(path("no_data_pkl"), [("archive/version", b"3\n")])
    refused["no_data_pkl"] = "no_data_pkl.pt"

    manifest = {"torch": torch.__version__, "numpy": np.__version__, "valid": valid,
                "refused": refused, "hostile_read": hostile_read}
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
