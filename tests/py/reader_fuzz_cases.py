"""The cases of the reader fuzz suite (tests/test_reader_fuzz.cpp): hostile variants of every
file format parity reads, each with the parity command line that reads it.

    reader_fuzz_cases.py FORMAT OUT_DIR

writes OUT_DIR/<files> and OUT_DIR/cases.tsv, one case per line: its name, then the words of
the parity command, tab-separated, naming files relative to OUT_DIR. A case that is a
directory (DCP) is named as one word too. Exits 3 naming the module when one this format
needs cannot be imported, so that the caller can skip the format and say why.

Every variant comes from a fixed seed (random.Random(FORMAT)), so the same files are written
on every run. Two kinds of variants per format:
  structured  the fields a reader computes with, set to what a careless or hostile writer
              puts there: lengths, offsets, counts, dims, dtypes, nesting, links, steps;
  bytes       the valid seed file with bits flipped, bytes set to edge values, 4- and 8-byte
              words replaced by edge integers, cut short, or with a chunk repeated.
"""
import io
import json
import os
import random
import struct
import sys
import zipfile
import zlib

FORMATS = ["torch-zip", "pickle", "safetensors", "hdf5", "dcp", "torchtitan", "megatron",
           "golden", "loss-file", "metrics", "npy", "bin", "toml"]

# Integers a reader computes with: zero, one, edges of the signed and unsigned widths.
EDGE_INTS = [0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1]

BYTE_VARIANTS = 8  # byte-level variants of each format's seed


def need(module):
    try:
        return __import__(module)
    except Exception as e:  # noqa: BLE001 (any import failure means: skip the format)
        print(f"reader_fuzz_cases: cannot import {module}: {e}", file=sys.stderr)
        sys.exit(3)


class Cases:
    def __init__(self, out, fmt):
        self.out, self.fmt, self.lines = out, fmt, []
        self.rng = random.Random(fmt)

    def file(self, name, data):
        with open(os.path.join(self.out, name), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape"))
        return name

    def add(self, name, *words):
        assert "\t" not in name and all("\t" not in w for w in words)
        self.lines.append("\t".join((name,) + words))

    def byte_variants(self, data, ext, command):
        """BYTE_VARIANTS mutants of `data`, each read by command(file name)."""
        for i in range(BYTE_VARIANTS):
            d = bytearray(data)
            kind = i % 6
            if kind == 0:  # a few bits flipped
                for _ in range(self.rng.randint(1, 8)):
                    p = self.rng.randrange(len(d))
                    d[p] ^= 1 << self.rng.randrange(8)
            elif kind == 1:  # bytes set to edge values
                for _ in range(self.rng.randint(1, 4)):
                    d[self.rng.randrange(len(d))] = self.rng.choice([0, 0x7F, 0x80, 0xFF])
            elif kind == 2:  # a 4- or 8-byte word replaced by an edge integer
                width = self.rng.choice([4, 8])
                p = self.rng.randrange(max(1, len(d) - width))
                v = self.rng.choice(EDGE_INTS) % (2 ** (8 * width))
                d[p:p + width] = v.to_bytes(width, "little")
            elif kind == 3:  # cut short
                d = d[:self.rng.randrange(len(d))]
            elif kind == 4:  # a chunk repeated
                a = self.rng.randrange(len(d))
                b = min(len(d), a + self.rng.randint(1, 64))
                d[a:a] = d[a:b] * self.rng.randint(1, 4)
            else:  # a chunk removed
                a = self.rng.randrange(len(d))
                del d[a:a + self.rng.randint(1, 32)]
            name = self.file(f"bytes{i}.{ext}", bytes(d))
            self.add(f"bytes{i}", *command(name))

    def write_manifest(self):
        with open(os.path.join(self.out, "cases.tsv"), "w") as f:
            f.write("".join(line + "\n" for line in self.lines))


# ---------------------------------------------------------------------------------------------
# safetensors


def safetensors_bytes(header, data=b"", length=None, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h) if length is None else length % 2**64) + h + data


def safetensors_seed():
    header = {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
              "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]},
              "i": {"dtype": "I64", "shape": [2], "data_offsets": [32, 48]}}
    data = struct.pack("<6f", 1, 2, 3, 4, 5, 6) + bytes(range(8)) + struct.pack("<2q", 7, -7)
    return header, data


def gen_safetensors(c):
    header, data = safetensors_seed()
    seed = c.file("seed.safetensors", safetensors_bytes(header, data))
    cmp = lambda name: ("compare", name, seed)  # noqa: E731
    c.add("seed", *cmp(seed))

    def variant(name, h=None, d=data, **kw):
        c.add(name, *cmp(c.file(name + ".safetensors",
                                safetensors_bytes(h if h is not None else header, d, **kw))))

    for v in [0, 7, 2**63, 2**64 - 1]:
        variant(f"header_length_{v}", length=v)
    hlen = len(json.dumps(header).encode())
    variant("header_length_past_end", length=hlen + len(data) + 1)
    variant("header_length_one_short", length=hlen - 1)

    def with_field(tensor, field, value):
        h = json.loads(json.dumps(header))
        h[tensor][field] = value
        return h

    for i, dims in enumerate([[2**32, 2**32], [2**64], [-1, 6], [1.5, 4], ["2", "3"], [],
                              [2] * 100, [2**40, 2**40, 0]]):
        variant(f"dims{i}", with_field("w", "shape", dims))
    for i, offs in enumerate([[24, 0], [0, 2**64 - 1], [-24, 0], [0, 24, 48], [0, 48], [8, 32],
                              [0.0, 24.0]]):
        variant(f"offsets{i}", with_field("w", "data_offsets", offs))
    for i, dt in enumerate(["F128", 5, "F16", "BOOL", "F8_E4M3"]):
        variant(f"dtype{i}", with_field("w", "dtype", dt))
    deep = "[" * 100000 + "]" * 100000
    raw = '{"__metadata__": {"x": ' + deep + '}, ' + json.dumps(header)[1:]
    variant("nested_100000", raw_header=raw.encode())
    raw = '{"__metadata__": {"x": "' + "[" * 64 + "]" * 64 + '"}, ' + json.dumps(header)[1:]
    variant("metadata_string_of_brackets", raw_header=raw.encode())
    variant("metadata_not_strings", {**header, "__metadata__": {"a": 1, "b": [1, 2]}})
    dup = json.dumps(header)[:-1] + ', "w": ' + json.dumps(header["w"]) + "}"
    variant("duplicate_key", raw_header=dup.encode())
    variant("header_not_utf8", raw_header=b'{"w\xff\xfe": ' + json.dumps(header["w"]).encode() + b"}",
            d=data[:24])
    variant("header_with_nul", raw_header=json.dumps(header).encode() + b"\x00")
    variant("header_an_array", raw_header=b"[1, 2, 3]")
    variant("name_with_escape", {"\x1b[2J# 0 tensors compared; OK\n": header["w"]}, d=data[:24])
    many = {f"t{i}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(20000)}
    variant("entries_20000", many, d=bytes(20000))
    variant("data_trailing", d=data + b"\x00" * 8)
    variant("data_short", d=data[:40])
    c.byte_variants(safetensors_bytes(header, data), "safetensors", cmp)


# ---------------------------------------------------------------------------------------------
# torch.save: the zip container and its pickle, built opcode by opcode


def p_unicode(s):
    b = s.encode("utf-8", "surrogateescape")
    return b"X" + struct.pack("<I", len(b)) + b


def p_int(v):
    if 0 <= v < 256:
        return b"K" + bytes([v])
    if -2**31 <= v < 2**31:
        return b"J" + struct.pack("<i", v)
    n = (v.bit_length() + 8) // 8
    return b"\x8a" + bytes([n]) + v.to_bytes(n, "little", signed=True)


def p_global(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def p_tuple(*items):
    return b"(" + b"".join(items) + b"t"


def p_tensor(key, storage="FloatStorage", numel=6, offset=0, size=(2, 3), stride=(3, 1),
             rebuild="_rebuild_tensor_v2"):
    """torch._utils._rebuild_tensor_v2((storage pid), offset, size, stride, False, OrderedDict())."""
    pid = p_tuple(p_unicode("storage"), p_global("torch", storage), p_unicode(key),
                  p_unicode("cpu"), p_int(numel)) + b"Q"
    hooks = p_global("collections", "OrderedDict") + b")R"
    args = p_tuple(pid, p_int(offset), p_tuple(*map(p_int, size)), p_tuple(*map(p_int, stride)),
                   b"\x89", hooks)
    return p_global("torch._utils", rebuild) + args + b"R"


def p_state_dict(entries):
    """An OrderedDict of (name, value pickle) pairs, protocol 2, ending in STOP."""
    body = b"".join(p_unicode(k) + v for k, v in entries)
    return b"\x80\x02" + p_global("collections", "OrderedDict") + b")R" + b"(" + body + b"u."


def torch_zip(pickle_bytes, storages, name="archive", extra=()):
    """A torch.save archive: data.pkl, data/<key> per storage, version; stored, not deflated."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{name}/data.pkl", pickle_bytes)
        for key, raw in storages:
            z.writestr(f"{name}/data/{key}", raw)
        z.writestr(f"{name}/version", "3\n")
        for n, raw in extra:
            z.writestr(n, raw)
    return buf.getvalue()


SEED_W = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
SEED_B = struct.pack("<4q", 1, 2, 3, 4)


def seed_pickle(**w):
    return p_state_dict([("w", p_tensor("0", **w)),
                         ("b", p_tensor("1", storage="LongStorage", numel=4, size=(4,),
                                        stride=(1,)))])


def seed_storages():
    return [("0", SEED_W), ("1", SEED_B)]


def gen_pickle(c):
    seed = c.file("seed.pt", torch_zip(seed_pickle(), seed_storages()))
    cmp = lambda name: ("compare", name, seed)  # noqa: E731
    c.add("seed", *cmp(seed))

    def variant(name, pkl, storages=None):
        c.add(name, *cmp(c.file(name + ".pt", torch_zip(pkl, seed_storages()
                                                         if storages is None else storages))))

    for v in [2**62, -1, 0]:
        variant(f"numel_{v}", seed_pickle(numel=v))
    for i, size in enumerate([(2**32, 2**32), (2**62, 4), (-2, 3), (1, 6, 1), (2, 3, 0),
                              (2,) * 70]):
        variant(f"size{i}", seed_pickle(size=size, stride=(1,) * len(size)))
    for i, stride in enumerate([(-3, 1), (2**62, 1), (0, 0)]):
        variant(f"stride{i}", seed_pickle(stride=stride))
    for v in [-1, 2**62]:
        variant(f"offset_{v}", seed_pickle(offset=v))
    variant("storage_missing", seed_pickle(), storages=[("1", SEED_B)])
    variant("storage_short", seed_pickle(), storages=[("0", SEED_W[:20]), ("1", SEED_B)])
    variant("storage_class_unknown", seed_pickle(storage="ComplexFloatStorage"))
    variant("storage_class_os", seed_pickle(storage="system"))
    variant("rebuild_other", seed_pickle(rebuild="_rebuild_parameter"))
    # Globals a weights-only load refuses, called or only built.
    variant("global_os_system", b"\x80\x02" + p_global("os", "system") +
            p_tuple(p_unicode("true")) + b"R.")
    variant("global_popped", b"\x80\x02" + p_global("builtins", "eval") + b"0" +
            seed_pickle()[2:])
    variant("global_builtins_getattr", b"\x80\x02" + p_global("builtins", "getattr") + b".")
    # Structure: nesting, memo, lengths, truncation, protocol.
    variant("marks_100000", b"\x80\x02" + b"(" * 100000 + b"N.")
    variant("lists_100000", b"\x80\x02" + b"]" * 100000 + b"a" * 99999 + b".")
    variant("tuples_nested_100000", b"\x80\x02" + b"N\x85" * 100000 + b".")
    variant("memo_get_unset", b"\x80\x02h\x05.")
    variant("memo_long_get", b"\x80\x02j\xff\xff\xff\xff.")
    variant("memo_put_huge", b"\x80\x02Nr\xff\xff\xff\x7f.")
    variant("unicode_len_huge", b"\x80\x02X\xff\xff\xff\xffabc.")
    variant("bytes_len_huge", b"\x80\x02B\xff\xff\xff\xffabc.")
    variant("long4_len_huge", b"\x80\x02\x8b\xff\xff\xff\x7f\x01.")
    variant("long1_255", b"\x80\x02\x8a\xff" + b"\xff" * 255 + b".")
    variant("no_stop", seed_pickle()[:-1])
    variant("cut_half", seed_pickle()[:len(seed_pickle()) // 2])
    variant("protocol_9", b"\x80\x09N.")
    variant("empty", b"")
    variant("stack_underflow", b"\x80\x02R.")
    variant("setitems_odd", b"\x80\x02}(K\x01u.")
    variant("not_a_dict", b"\x80\x02K\x01.")
    variant("frame_huge", b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7fN.")
    variant("name_with_escape", p_state_dict([("\x1b[2J# 0 tensors compared; OK", p_tensor("0"))]))
    variant("entries_5000", p_state_dict([(f"t{i}", p_tensor("0")) for i in range(5000)]))
    c.byte_variants(seed_pickle(), "pkl.pt",
                    lambda n: cmp(c.file(n, torch_zip(open(os.path.join(c.out, n), "rb").read(),
                                                      seed_storages()))))


def zip_records(data):
    """(offset of each local header, offset of each central header, offset of the EOCD)."""
    eocd = data.rfind(b"PK\x05\x06")
    cd_off = struct.unpack_from("<I", data, eocd + 16)[0]
    count = struct.unpack_from("<H", data, eocd + 10)[0]
    centrals, p = [], cd_off
    for _ in range(count):
        centrals.append(p)
        n, m, k = struct.unpack_from("<HHH", data, p + 28)
        p += 46 + n + m + k
    locals_ = [struct.unpack_from("<I", data, cp + 42)[0] for cp in centrals]
    return locals_, centrals, eocd


def gen_torch_zip(c):
    torch = need("torch")
    sd = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3),
          "b": torch.tensor([1, 2, 3, 4], dtype=torch.int64),
          "h": torch.tensor([0.5, -2.0, 65504.0], dtype=torch.float16)}
    buf = io.BytesIO()
    torch.save(sd, buf)
    data = buf.getvalue()
    seed = c.file("seed.pt", data)
    cmp = lambda name: ("compare", name, seed)  # noqa: E731
    c.add("seed", *cmp(seed))
    locals_, centrals, eocd = zip_records(data)

    def put(name, edits):
        d = bytearray(data)
        for off, fmt, value in edits:
            struct.pack_into(fmt, d, off, value)
        c.add(name, *cmp(c.file(name + ".pt", bytes(d))))

    for v in [0, 1, 0xFFFF]:
        put(f"eocd_entries_{v}", [(eocd + 8, "<H", v), (eocd + 10, "<H", v)])
    for v in [0, len(data), 0xFFFFFFFF]:
        put(f"eocd_cd_offset_{v}", [(eocd + 16, "<I", v)])
    put("eocd_cd_size_huge", [(eocd + 12, "<I", 0xFFFFFFFF)])
    put("eocd_comment_huge", [(eocd + 20, "<H", 0xFFFF)])
    for i, cp in enumerate(centrals[:2]):
        put(f"central{i}_sizes_zip64_marker", [(cp + 20, "<I", 0xFFFFFFFF), (cp + 24, "<I", 0xFFFFFFFF)])
        put(f"central{i}_size_huge", [(cp + 20, "<I", 0x7FFFFFFF), (cp + 24, "<I", 0x7FFFFFFF)])
        put(f"central{i}_local_offset_past_end", [(cp + 42, "<I", len(data) + 100)])
        put(f"central{i}_name_length_huge", [(cp + 28, "<H", 0xFFFF)])
        put(f"central{i}_crc_wrong", [(cp + 16, "<I", 0x12345678)])
        put(f"central{i}_method_deflate", [(cp + 10, "<H", 8)])
        put(f"central{i}_method_99", [(cp + 10, "<H", 99)])
    for i, lp in enumerate(locals_[:2]):
        put(f"local{i}_name_length_huge", [(lp + 26, "<H", 0xFFFF)])
        put(f"local{i}_extra_length_huge", [(lp + 28, "<H", 0xFFFF)])
    # Every CRC-32 recorded as 0, as a writer with CRC-32s off records them: read unchecked.
    d = bytearray(data)
    for cp in centrals:
        struct.pack_into("<I", d, cp + 16, 0)
    for lp in locals_:
        struct.pack_into("<I", d, lp + 14, 0)
    c.add("crc_all_zero", *cmp(c.file("crc_all_zero.pt", bytes(d))))
    # One storage's CRC-32 recorded as 0 and a byte of it changed, the others kept: damaged.
    d = bytearray(data)
    for cp, lp in zip(centrals, locals_):
        n, m = struct.unpack_from("<HH", d, lp + 26)
        if bytes(d[lp + 30:lp + 30 + n]).endswith(b"/data/0"):
            struct.pack_into("<I", d, cp + 16, 0)
            struct.pack_into("<I", d, lp + 14, 0)
            d[lp + 30 + n + m] ^= 0x40
    c.add("crc_one_zero_data_changed", *cmp(c.file("crc_one_zero_data_changed.pt", bytes(d))))
    # A zip64 end locator that points nowhere.
    loc = struct.pack("<IIQI", 0x07064B50, 0, 2**63, 1)
    c.add("zip64_locator_bogus", *cmp(c.file("zip64_locator_bogus.pt", data[:eocd] + loc + data[eocd:])))
    # Two entries of one name; an entry deflated for real.
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = z.namelist()
        blobs = {n: z.read(n) for n in names}
    for label, mode, dup in [("duplicate_names", zipfile.ZIP_STORED, True),
                             ("deflated", zipfile.ZIP_DEFLATED, False)]:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", mode) as z:
            for n in names:
                z.writestr(n, blobs[n])
            if dup:
                import warnings
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    z.writestr(names[-1], blobs[names[-1]] + b"x")
        c.add(label, *cmp(c.file(label + ".pt", out.getvalue())))
    # A deflated data record that inflates to 64 MiB while the archive says 24 bytes.
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = bomb.compress(bytes(64 << 20)) + bomb.flush()
    c.add("not_a_zip", *cmp(c.file("not_a_zip.pt", b"PK\x03\x04" + raw[:100])))
    c.add("deflate_bomb_local", *cmp(c.file("deflate_bomb_local.pt",
                                            b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + raw)))
    c.byte_variants(data, "pt", cmp)


# ---------------------------------------------------------------------------------------------
# HDF5, through h5py


def gen_hdf5(c):
    h5py = need("h5py")
    np = need("numpy")
    path = lambda n: os.path.join(c.out, n)  # noqa: E731
    with h5py.File(path("seed.h5"), "w") as f:
        f["w"] = np.arange(6, dtype=np.float32).reshape(2, 3)
        f["grads/w"] = np.ones((2, 3), dtype=np.float32)
        f["b"] = np.arange(4, dtype=np.int64)
    seed = "seed.h5"
    cmp = lambda name: ("compare", name, seed)  # noqa: E731
    c.add("seed", *cmp(seed))

    def make(name, build):
        with h5py.File(path(name + ".h5"), "w") as f:
            build(f)
        c.add(name, *cmp(name + ".h5"))

    def fill_only(shape, fill, chunks):
        return lambda f: f.create_dataset("w", shape=shape, dtype="f4", chunks=chunks,
                                          fillvalue=fill)
    make("fill_2p32_squared", fill_only((2**32, 2**32), 1.0, (1, 1024)))
    make("fill_40GB", fill_only((10**5, 10**5), 0.0, (1, 100000)))
    make("fill_2p63", fill_only((2**31, 2**31, 2), 0.0, (1, 1, 2)))
    make("empty_huge_dims", fill_only((2**40, 2**40, 0), 0.0, None))

    def bomb(f):  # 8 GiB of zeros from 8 MiB of gzip chunks: one chunk compressed, written 2048 times
        d = f.create_dataset("w", shape=(2048, 1 << 20), dtype="f4", chunks=(1, 1 << 20),
                             compression="gzip")
        chunk = zlib.compress(bytes(4 << 20), 9)
        for i in range(2048):
            d.id.write_direct_chunk((i, 0), chunk)
    make("gzip_bomb", bomb)
    for dt in ["c8", "S4", "?", "f2", ">f4"]:
        make("dtype_" + dt.replace(">", "big_").replace("<", "little_"),
             lambda f, dt=dt: f.create_dataset("w", data=np.zeros((2, 3), dtype=dt)))
    make("dtype_compound", lambda f: f.create_dataset(
        "w", data=np.zeros(3, dtype=[("a", "f4"), ("b", "i8")])))
    make("dtype_vlen_str", lambda f: f.create_dataset(
        "w", data=["a", "bb"], dtype=h5py.string_dtype()))
    make("dtype_enum", lambda f: f.create_dataset(
        "w", data=np.zeros(3, dtype="i1"), dtype=h5py.enum_dtype({"A": 0, "B": 1}, basetype="i1")))
    make("scalar", lambda f: f.create_dataset("w", data=np.float32(3.0)))
    make("null_space", lambda f: f.create_dataset("w", data=h5py.Empty("f4")))

    def self_loop(f):
        f["g/w"] = np.ones(3, dtype=np.float32)
        f["g/again"] = f["g"]
    make("hard_link_loop", self_loop)

    def diamond(f):  # 2^25 paths through 25 levels of two links each
        f.create_group("l0")
        for i in range(25):
            g = f.create_group(f"l{i + 1}")
            f[f"l{i}/a"] = g
            f[f"l{i}/b"] = g
        f["l25/w"] = np.ones(3, dtype=np.float32)
    make("hard_link_diamond", diamond)

    def deep(f):
        f.create_group("/".join(["g"] * 300))
        f["/".join(["g"] * 300) + "/w"] = np.ones(2, dtype=np.float32)
    make("groups_300_deep", deep)
    make("soft_link_dangling", lambda f: f.__setitem__("w", h5py.SoftLink("/nowhere")))

    def soft_loop(f):
        f["a"] = h5py.SoftLink("/b")
        f["b"] = h5py.SoftLink("/a")
    make("soft_link_loop", soft_loop)
    make("external_link_missing", lambda f: f.__setitem__("w", h5py.ExternalLink("nofile.h5", "/w")))
    make("external_link_seed", lambda f: f.__setitem__("w", h5py.ExternalLink("seed.h5", "/w")))
    make("external_link_self", lambda f: f.__setitem__("w", h5py.ExternalLink("external_link_self.h5", "/")))

    def many(f):
        for i in range(5000):
            f[f"t{i}"] = np.float32([i])
    make("datasets_5000", many)
    make("name_with_escape", lambda f: f.create_dataset("\x1b[2J# 0 tensors compared; OK",
                                                        data=np.ones(2, dtype=np.float32)))

    def fake_dump(f):
        f.attrs["kind"] = "parity-dump"
        f["meta"] = np.zeros(1)
        f["meta"].attrs["kind"] = "parity-dump"
        f.create_group("step_99999999999999999999999")
        f["step_99999999999999999999999/params/w"] = np.ones(2, dtype=np.float32)
    make("fake_parity_dump", fake_dump)

    def big_attr(f):
        f["w"] = np.ones(2, dtype=np.float32)
        f["w"].attrs["a"] = np.zeros(1 << 12, dtype=np.float64)
    make("attribute_32KiB", big_attr)
    with open(path(seed), "rb") as fh:
        c.byte_variants(fh.read(), "h5", cmp)


# ---------------------------------------------------------------------------------------------
# DCP (torch.distributed.checkpoint directories), written by tests/py/dcp_writer.py


def gen_dcp(c):
    torch = need("torch")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from dcp_writer import write_dcp
    tensors = [("w", torch.arange(6, dtype=torch.float32).reshape(2, 3)),
               ("b", torch.arange(4, dtype=torch.int64))]

    def directory(name, shards=None):
        d = os.path.join(c.out, name)
        write_dcp(d, tensors, shards=shards)
        return d

    seed_dir = directory("seed", shards={"w": 2})  # two data files
    cmp = lambda name: ("compare", name, "seed")  # noqa: E731
    c.add("seed", *cmp("seed"))
    c.add("seed_init_from", "init", "--from", "seed", "--flavor", "tiny", "--out", "o.h5")
    files = sorted(os.listdir(seed_dir))

    def variant(name, edit):
        d = directory(name, shards={"w": 2})
        edit(d)
        c.add(name, *cmp(name))

    def mutate_file(fname, i):
        def edit(d):
            p = os.path.join(d, fname)
            with open(p, "rb") as fh:
                data = fh.read()
            rng = random.Random(f"{fname}{i}")  # its own seeded mutations
            d2 = bytearray(data)
            kind = i % 4
            if kind == 0:
                for _ in range(rng.randint(1, 8)):
                    q = rng.randrange(len(d2))
                    d2[q] ^= 1 << rng.randrange(8)
            elif kind == 1:
                d2 = d2[:rng.randrange(len(d2))]
            elif kind == 2:
                width = rng.choice([4, 8])
                q = rng.randrange(max(1, len(d2) - width))
                d2[q:q + width] = (rng.choice(EDGE_INTS) % 2 ** (8 * width)).to_bytes(width, "little")
            else:
                a = rng.randrange(len(d2))
                d2[a:a] = d2[a:a + 16] * 3
            with open(p, "wb") as fh:
                fh.write(bytes(d2))
        return edit

    for fname in files:
        for i in range(6):
            variant(f"{fname.strip('_.')}_{i}", mutate_file(fname, i))
    variant("metadata_missing", lambda d: os.remove(os.path.join(d, ".metadata")))
    variant("data_file_missing", lambda d: os.remove(os.path.join(d, [f for f in files if f.endswith(".distcp")][0])))
    variant("metadata_empty", lambda d: open(os.path.join(d, ".metadata"), "wb").close())
    variant("metadata_os_system", lambda d: open(os.path.join(d, ".metadata"), "wb").write(
        b"\x80\x02" + p_global("os", "system") + p_tuple(p_unicode("true")) + b"R."))
    variant("metadata_nested_100000", lambda d: open(os.path.join(d, ".metadata"), "wb").write(
        b"\x80\x02" + b"]" * 100000 + b"."))


# ---------------------------------------------------------------------------------------------
# Training logs: torchtitan, Megatron-LM, golden values, loss files, parity's metrics


LONG = 100000


def log_variants(c, ext, seed_text, line_of, extra):
    """The structured variants every line-based log shares, then `extra` (name, text) pairs."""
    seed = c.file("seed." + ext, seed_text)
    drift = lambda name: ("drift", seed, name)  # noqa: E731
    c.add("seed", *drift(seed))
    c.add("seed_as_reference", "drift", c.file("ref." + ext, seed_text), seed)
    rows = [
        ("step_2p63", line_of(2**63, "2.5", "1.0")),
        ("step_2p64", line_of(2**64, "2.5", "1.0")),
        ("step_2p63_minus_1", line_of(2**63 - 1, "2.5", "1.0")),
        ("step_zero", line_of(0, "2.5", "1.0")),
        ("step_digits_1000", line_of(int("9" * 1000), "2.5", "1.0")),
        ("loss_nan", line_of(1, "nan", "1.0")),
        ("loss_inf", line_of(1, "inf", "1.0")),
        ("loss_1e400", line_of(1, "1e400", "1.0")),
        ("loss_digits_100000", line_of(1, "1" * LONG, "1.0")),
        ("loss_exponent_huge", line_of(1, "1e99999999999999999999", "1.0")),
        ("grad_norm_negative", line_of(1, "2.5", "-1")),
        ("spaces_100000", line_of(1, "2.5", "1.0").replace(" ", " " * LONG, 1)),
        ("twice_differently", line_of(1, "2.5", "1.0") + line_of(1, "2.6", "1.0")),
        ("nul_bytes", line_of(1, "2.5", "1.0").replace(" ", "\0", 2)),
        ("crlf", line_of(1, "2.5", "1.0").replace("\n", "\r\n") * 3),
        ("no_newline_at_end", line_of(1, "2.5", "1.0").rstrip("\n")),
        ("invalid_utf8", line_of(1, "2.5\udcff\udcfe", "1.0")),
        ("colour_codes_50000", "\x1b[0;" * 50000 + line_of(1, "2.5", "1.0")),
        ("empty", ""),
        ("one_long_line", "x" * (4 << 20)),
        ("steps_100000", "".join(line_of(s, "2.5", "1.0") for s in range(1, 100001))),
        ("steps_descending", "".join(line_of(s, "2.5", "1.0") for s in range(50, 0, -1))),
    ] + extra
    for name, text in rows:
        c.add(name, *drift(c.file(f"{name}.{ext}", text)))
    c.byte_variants(seed_text.encode(), ext, drift)


def titan_line(step, loss, norm):
    return (f"[rank0]:[titan] 2026-01-01 00:00:00,000 - root - INFO - \x1b[31mstep: {step}  "
            f"\x1b[32mloss: {loss}  \x1b[38;2;180;60;0mgrad_norm: {norm}  \x1b[33mmemory: 1.0GiB\x1b[39m\n")


def megatron_line(step, loss, norm):
    return (f" [2026-01-01 00:00:00] iteration {step:>8}/ 100 | consumed samples: 8 | "
            f"elapsed time per iteration (ms): 10.0 | learning rate: 1.0E-04 | lm loss: {loss} | "
            f"loss scale: 1.0 | grad norm: {norm} | number of skipped iterations:   0 |\n")


def loss_file_line(step, loss, norm):
    return f"{step} {loss} {norm}\n"


def metrics_line(step, loss, norm):
    return (f'{{"step": {step}, "loss": {loss}, "grad_norm": {norm}, '
            f'"loss_hex": "0x1.4p+1", "grad_norm_hex": "0x1p+0"}}\n')


def gen_torchtitan(c):
    seed = "".join(titan_line(s, 10.0 / s, 1.0 + s / 8) for s in range(1, 21))
    log_variants(c, "log", seed, titan_line, [
        ("validate_only", "validate step: 1  loss: 2.5\n"),
        ("step_word_tail", "substep: 1  loss: 2.5\n" * 3),
        ("steps_and_losses_10000_on_one_line", "step: 1  loss: 2.5  " * 10000 + "\n"),
    ])


def gen_megatron(c):
    seed = "".join(megatron_line(s, 10.0 / s, 1.0 + s / 8) for s in range(1, 21))
    log_variants(c, "log", seed, megatron_line, [
        ("iteration_without_total", " iteration 5 | lm loss: 2.5 |\n"),
        ("iterations_10000_on_one_line", " iteration 1/ 2 |" * 10000 + " lm loss: 2.5 |\n"),
    ])


def gen_loss_file(c):
    seed = "".join(loss_file_line(s, 10.0 / s, 1.0 + s / 8) for s in range(1, 21))
    log_variants(c, "txt", seed, loss_file_line, [
        ("four_columns", "1 2.5 1.0 7\n"),
        ("hex_floats", "1 0x1.4p+1 0x1p+0\n2 0x1.2p+1 0x1p+0\n"),
    ])


def gen_metrics(c):
    seed = "".join(metrics_line(s, 10.0 / s, 1.0 + s / 8) for s in range(1, 21))
    deep = '{"step": 1, "loss": ' + "[" * LONG + "]" * LONG + "}\n"
    log_variants(c, "jsonl", seed, metrics_line, [
        ("nested_100000", deep),
        ("nested_65", '{"step": 1, "loss": 2.5, "x": ' + "[" * 63 + "]" * 63 + "}\n"),
        ("step_a_float", '{"step": 1.5, "loss": 2.5}\n'),
        ("step_unsigned_huge", '{"step": 18446744073709551615, "loss": 2.5}\n'),
        ("hex_not_a_number", '{"step": 1, "loss": 2.5, "loss_hex": "0xzz"}\n'),
        ("loss_an_object", '{"step": 1, "loss": {"a": 1}}\n'),
        ("duplicate_keys", '{"step": 1, "step": 2, "loss": 2.5}\n'),
    ])


def gen_golden(c):
    seed_doc = {"lm loss": {"start_step": 1, "end_step": 20, "step_interval": 1,
                            "values": {str(s): 10.0 / s for s in range(1, 21)}},
                "grad-norm": {"start_step": 1, "end_step": 20, "step_interval": 1,
                              "values": {str(s): 1.0 + s / 8 for s in range(1, 21)}}}
    seed = c.file("seed.json", json.dumps(seed_doc))
    drift = lambda name: ("drift", seed, name)  # noqa: E731
    c.add("seed", *drift(seed))

    def variant(name, doc=None, raw=None):
        c.add(name, *drift(c.file(name + ".json", raw if raw is not None else json.dumps(doc))))

    def listed(start, interval, n, extra=None):
        d = {"lm loss": {"start_step": start, "end_step": 20, "step_interval": interval,
                         "values": [2.5] * n}}
        d["lm loss"].update(extra or {})
        return d
    for start in [0, -1, 2**62, 2**63 - 1, 2**63, 2**64, 1.5, "1"]:
        variant(f"start_{start}", listed(start, 1, 5))
    for interval in [0, -1, 2**62, 2**63, 1.5]:
        variant(f"interval_{interval}", listed(1, interval, 5))
    variant("values_100000", listed(1, 1, 100000))
    variant("values_keys_huge", {"lm loss": {"values": {str(2**63): 1.0, str(2**64): 2.0}}})
    variant("values_keys_not_numbers", {"lm loss": {"values": {"a": 1.0, "-1": 2.0}}})
    variant("values_not_numbers", {"lm loss": {"values": {"1": "x", "2": [1], "3": None}}})
    variant("values_nested_100000", raw='{"lm loss": {"values": {"1": ' + "[" * LONG + "]" * LONG + "}}}")
    variant("values_nested_70", raw='{"lm loss": {"values": {"1": ' + "[" * 70 + "]" * 70 + "}}}")
    variant("no_lm_loss", {"grad-norm": seed_doc["grad-norm"]})
    variant("grad_norm_fewer", {**seed_doc, "grad-norm": {"values": {"1": 1.0}}})
    variant("not_an_object", [1, 2, 3])
    variant("truncated", raw=json.dumps(seed_doc)[:50])
    variant("duplicate_keys", raw='{"lm loss": {"values": {"1": 2.5}}, "lm loss": {"values": {"1": 2.6}}}')
    variant("number_digits_100000", raw='{"lm loss": {"values": {"1": ' + "1" * LONG + "}}}")
    variant("string_escapes", raw='{"lm loss": {"values": {"\\u0000\\ud800": 2.5}}}')
    c.byte_variants(json.dumps(seed_doc).encode(), "json", drift)


# ---------------------------------------------------------------------------------------------
# Token files: NumPy .npy, parity's own token file, raw .bin


def train_with(*words):
    return ("train", "--flavor", "tiny", "--steps", "1", "--seq-len", "8", "--microbatches", "1",
            "--quiet") + words


def npy_bytes(descr="<u2", shape=(64,), data=None, version=1, fortran=False, header=None,
              header_len=None):
    if header is None:
        header = (f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': "
                  f"({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), }}")
    h = header.encode("latin1")
    width = 2 if version == 1 else 4
    pad = (64 - (8 + width + len(h) + 1) % 64) % 64
    h = h + b" " * pad + b"\n"
    n = len(h) if header_len is None else header_len
    head = b"\x93NUMPY" + bytes([version, 0]) + n.to_bytes(width, "little") + h
    if data is None:
        data = b"".join(struct.pack("<H", 3 + i % 200) for i in range(64))
    return head + data


def gen_npy(c):
    seed = c.file("seed.npy", npy_bytes())
    toks = lambda name: train_with("--tokens", name)  # noqa: E731
    pos = lambda name: train_with("--tokens", seed, "--positions", name,  # noqa: E731
                                  "--documents", "on")
    c.add("seed", *toks(seed))

    def variant(name, command=toks, **kw):
        c.add(name, *command(c.file(name + ".npy", npy_bytes(**kw))))

    for i, shape in enumerate([(2**32, 2**32), (2**64,), (-1,), (0,), (2**40, 2**40, 0), (8, 8),
                               (65,)]):
        variant(f"shape{i}", shape=shape)
    for descr in ["<u8", ">u2", "<f8", "|O", "<i8"]:
        variant("descr_" + descr.replace("<", "le_").replace(">", "be_").replace("|", ""),
                descr=descr)
    variant("fortran_order", fortran=True)
    variant("version_2", version=2)
    variant("version_3", version=3)
    variant("version_9", version=9)
    for v in [0, 1, 0xFFFF]:
        variant(f"header_len_{v}", header_len=v)
    variant("version_2_header_len_huge", version=2, header_len=2**32 - 1)
    variant("header_not_a_dict", header="[1, 2, 3]")
    variant("header_nested_10000", header="{'descr': " + "(" * 10000 + ")" * 10000 + "}")
    variant("header_long_1MiB", version=2, header="{'descr': '<u2', 'x': '" + "a" * (1 << 20) +
            "', 'fortran_order': False, 'shape': (64,), }")
    variant("data_short", data=bytes(10))
    variant("data_long", data=bytes(64 * 2 + 7))
    variant("ids_past_vocab", data=struct.pack("<64H", *([65535] * 64)))
    variant("ids_negative", descr="<i4", data=struct.pack("<64i", *([-1] * 64)))
    variant("positions_huge", command=pos, descr="<i8", data=struct.pack("<64q", *([2**62] * 64)))
    variant("positions_negative", command=pos, descr="<i4", data=struct.pack("<64i", *([-5] * 64)))
    variant("positions_shape_huge", command=pos, shape=(2**40, 2**40, 0))
    c.byte_variants(npy_bytes(), "npy", toks)


def gen_bin(c):
    ids = [3 + i % 200 for i in range(64)]
    body = struct.pack(f"<{len(ids)}i", *ids)

    def fnv1a(data):
        h = 0xcbf29ce484222325
        for b in data:
            h = ((h ^ b) * 0x100000001b3) % 2**64
        return h

    def token_file(num=None, vocab=2048, eos=1, checksum=None, data=body):
        n = len(data) // 4 if num is None else num
        cs = fnv1a(data) if checksum is None else checksum
        return b"PRTYTOK1" + struct.pack("<QiiQ", n % 2**64, vocab, eos, cs % 2**64) + data
    seed = c.file("seed.bin", token_file())
    toks = lambda name: train_with("--tokens", name)  # noqa: E731
    c.add("seed", *toks(seed))
    for num in [0, 2**62, 2**64 - 1, 65]:
        c.add(f"num_tokens_{num}", *toks(c.file(f"num_tokens_{num}.bin", token_file(num=num))))
    for vocab in [-1, 5]:
        c.add(f"vocab_{vocab}", *toks(c.file(f"vocab_{vocab}.bin", token_file(vocab=vocab))))
    for eos in [-1, 2**31 - 1]:
        c.add(f"eos_{eos}", *toks(c.file(f"eos_{eos}.bin", token_file(eos=eos))))
    c.add("checksum_wrong", *toks(c.file("checksum_wrong.bin", token_file(checksum=1))))
    c.add("header_only", *toks(c.file("header_only.bin", token_file(data=b""))))
    raw = lambda name, dt: train_with("--tokens", name, "--tokens-dtype", dt)  # noqa: E731
    for dt, data in [("uint16", bytes(3)), ("uint16", b""), ("int32", bytes(6)),
                     ("int64", struct.pack("<8q", *([2**63 - 1] * 8))),
                     ("int32", struct.pack("<8i", *([-1] * 8))),
                     ("uint16", struct.pack("<64H", *ids))]:
        name = f"raw_{dt}_{len(data)}"
        c.add(name, *raw(c.file(name + ".bin", data), dt))
    c.byte_variants(token_file(), "bin", toks)


# ---------------------------------------------------------------------------------------------
# Matrix files (TOML)


def gen_toml(c):
    seed_text = ('name = "m"\n[defaults]\nflavor = "tiny"\nsteps = 1\nseq_len = 16\n'
                 'microbatches = 2\n[[cell]]\nname = "ref"\n[[cell]]\nname = "cached"\n'
                 'reference = "ref"\ntrainer = "pipelined"\npp = 2\nvp = 2\ngate = "order-only"\n')
    seed = c.file("seed.toml", seed_text)
    plan = lambda name: ("matrix", "plan", name, "--out", "P")  # noqa: E731
    c.add("seed", *plan(seed))

    def variant(name, text):
        c.add(name, *plan(c.file(name + ".toml", text)))

    variant("arrays_nested_10000", "name = \"m\"\nx = " + "[" * 10000 + "]" * 10000 + "\n")
    variant("inline_tables_nested_10000", "name = \"m\"\nx = " + "{a = " * 10000 + "1" + "}" * 10000 + "\n")
    variant("dotted_key_10000", "name = \"m\"\n" + ".".join(["a"] * 10000) + " = 1\n")
    variant("table_header_10000", "[" + ".".join(["a"] * 10000) + "]\n")
    for v in ["9223372036854775808", "-9223372036854775809", "1e400", "nan", "inf",
              "99999999999999999999999", "0x7FFFFFFFFFFFFFFF"]:
        variant(f"steps_{v}", seed_text.replace("steps = 1", f"steps = {v}"))
    variant("pp_huge", seed_text.replace("pp = 2", "pp = 4294967296"))
    variant("cells_2000", 'name = "m"\n[defaults]\nflavor = "tiny"\nsteps = 1\n' +
            "".join(f'[[cell]]\nname = "c{i}"\n' for i in range(2000)))
    variant("reference_cycle", 'name = "m"\n[[cell]]\nname = "a"\nreference = "b"\n'
            '[[cell]]\nname = "b"\nreference = "a"\n')
    variant("reference_self", 'name = "m"\n[[cell]]\nname = "a"\nreference = "a"\n')
    variant("name_with_escape", 'name = "\\u001b[2J"\n[[cell]]\nname = "\\u001b[2Jref\\n# OK"\n')
    variant("name_path_escape", 'name = "m"\n[[cell]]\nname = "../../etc"\n')
    variant("duplicate_key", seed_text + "name = \"again\"\n")
    variant("invalid_utf8", seed_text.replace('"m"', '"m\udcff"'))
    variant("string_1MiB", 'name = "' + "a" * (1 << 20) + '"\n')
    variant("unknown_keys", seed_text + "surprise = 1\n")
    variant("empty", "")
    variant("nul", "name = \"m\0\"\n")
    c.byte_variants(seed_text.encode(), "toml", plan)


GENERATORS = {"torch-zip": gen_torch_zip, "pickle": gen_pickle, "safetensors": gen_safetensors,
              "hdf5": gen_hdf5, "dcp": gen_dcp, "torchtitan": gen_torchtitan,
              "megatron": gen_megatron, "golden": gen_golden, "loss-file": gen_loss_file,
              "metrics": gen_metrics, "npy": gen_npy, "bin": gen_bin, "toml": gen_toml}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in GENERATORS:
        sys.exit(f"usage: reader_fuzz_cases.py {{{'|'.join(FORMATS)}}} OUT_DIR")
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    c = Cases(out, sys.argv[1])
    GENERATORS[sys.argv[1]](c)
    c.write_manifest()


if __name__ == "__main__":
    main()
