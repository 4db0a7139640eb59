"""Writes the safetensors fixtures for tests/test_safetensors.cpp into OUTDIR.

Usage: safetensors_fixtures.py OUTDIR

The tensors are real torch tensors (fixed seed); the file is written by hand following the
safetensors specification, since the safetensors package is not installed here:

    8 bytes   little-endian uint64 n, the header size
    n bytes   UTF-8 JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
              "__metadata__": {str: str}}, padded with spaces so that 8 + n is a multiple of 8
    rest      the byte buffer; offsets are relative to its start

Outputs:
    fixture.safetensors  every tensor below, laid out in LAYOUT order (not name order), with a
                         header whose keys are in yet another order
    expected.json        {"file": ..., "tensors": [{"name", "dtype", "shape", "offset",
                         "nbytes"}]} in layout order, the order the reader must return them;
                         offset/nbytes index expected.bin
    expected.bin         each tensor's raw bytes as torch holds them
                         (t.view(same-size int dtype).numpy().tobytes()), concatenated

Exits 3 naming the module when torch or numpy cannot be imported, so the caller can skip.
"""

import json
import os
import struct
import sys

try:
    import torch
    import numpy as np
except ImportError as e:  # the C++ test turns this line into a GTEST_SKIP
    print(f"missing module: {e.name}", file=sys.stderr)
    sys.exit(3)

from tensor_bits import from_bits, raw_bytes  # noqa: E402  (after the module check)

# safetensors dtype string, and the same-size integer dtype whose view gives torch's bytes.
DTYPES = {
    torch.bfloat16: ("BF16", torch.int16),
    torch.float16: ("F16", torch.int16),
    torch.float32: ("F32", torch.int32),
    torch.float64: ("F64", torch.int64),
    torch.int64: ("I64", torch.int64),
    torch.int32: ("I32", torch.int32),
    torch.uint8: ("U8", torch.uint8),
}




def special_values():
    """NaN with payloads, +-inf, -0.0, subnormals and ordinary values, per floating dtype."""
    bf16 = from_bits(
        [0x7F81, 0xFFC3, 0x7FC0, 0x7F80, 0xFF80, 0x8000, 0x0000, 0x0001, 0x807F, 0x3F80, 0xC2F7],
        np.uint16, np.int16, torch.bfloat16)
    f16 = from_bits(
        [0x7E01, 0xFD55, 0x7C01, 0x7C00, 0xFC00, 0x8000, 0x0000, 0x0001, 0x83FF, 0x3C00, 0xC248],
        np.uint16, np.int16, torch.float16)
    f32 = from_bits(
        [0x7FC00001, 0xFF800123, 0x7F800001, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001,
         0x807FFFFF, 0x3F800000, 0xC0490FDB],
        np.uint32, np.int32, torch.float32)
    f64 = from_bits(
        [0x7FF8000000000001, 0xFFF0000000000ABC, 0x7FF0000000000000, 0xFFF0000000000000,
         0x8000000000000000, 0x0000000000000001, 0x800FFFFFFFFFFFFF, 0x400921FB54442D18],
        np.uint64, np.int64, torch.float64)
    return bf16, f16, f32, f64


def tensors():
    torch.manual_seed(20240611)
    bf16_special, f16_special, f32_special, f64_special = special_values()
    base = torch.randn(3, 4, 5, dtype=torch.float64)
    return {
        "blocks.0.attn.wq.weight": base.to(torch.bfloat16),
        "blocks.0.attn.wq.weight.fp16": base.to(torch.float16),
        "blocks.0.mlp.w1": torch.randn(4, 6).t(),  # a transposed view, written contiguous
        "blocks.0.mlp.w1.fp64": base.view(12, 5),
        "special.bf16": bf16_special,
        "special.f16": f16_special,
        "special.f32": f32_special,
        "special.f64": f64_special,
        "special.f32.tiny": torch.randn(7) * 1e-41,  # subnormal float32 values
        "scalar.loss": torch.tensor(2.718281828, dtype=torch.float32),  # 0-dim
        "empty.rows": torch.zeros(0, 3, dtype=torch.float32),
        "empty.flat": torch.zeros(0, dtype=torch.bfloat16),
        "tokens.i64": torch.randint(-(2 ** 40), 2 ** 40, (2, 3), dtype=torch.int64),
        "mask.i32": torch.tensor([-2147483648, -1, 0, 1, 2147483647], dtype=torch.int32),
        "bytes.u8": torch.arange(0, 256, 37, dtype=torch.uint8),
        "blocks.0.norm.\u03c9": torch.randn(2, 2).to(torch.bfloat16),  # a non-ASCII name
    }


# The order the tensors lie in the buffer: neither name order nor the dict's order, so a reader
# that returns name order or header order fails. The two empty tensors sit between others.
LAYOUT = [
    "special.f64", "tokens.i64", "blocks.0.mlp.w1", "empty.rows", "special.bf16", "bytes.u8",
    "blocks.0.attn.wq.weight", "scalar.loss", "special.f32", "blocks.0.norm.\u03c9",
    "empty.flat", "mask.i32", "blocks.0.attn.wq.weight.fp16", "special.f16",
    "blocks.0.mlp.w1.fp64", "special.f32.tiny",
]


def main():
    if len(sys.argv) != 2:
        print("usage: safetensors_fixtures.py OUTDIR", file=sys.stderr)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    ts = tensors()
    assert sorted(LAYOUT) == sorted(ts), "LAYOUT must name every tensor once"

    header, expected, buffer, blob = {}, [], bytearray(), bytearray()
    for name in LAYOUT:
        t = ts[name]
        raw = raw_bytes(t)
        assert len(raw) == t.numel() * t.element_size()
        begin = len(buffer)
        buffer += raw
        header[name] = {"dtype": DTYPES[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [begin, len(buffer)]}
        expected.append({"name": name, "dtype": DTYPES[t.dtype][0], "shape": list(t.shape),
                         "offset": len(blob), "nbytes": len(raw)})
        blob += raw

    # The header's keys in reverse name order with the metadata in the middle, keys inside an
    # entry in another order than the specification lists them.
    ordered = {}
    for i, name in enumerate(sorted(header, reverse=True)):
        if i == 5:
            ordered["__metadata__"] = {"format": "pt", "written_by": "parity tests"}
        e = header[name]
        ordered[name] = {"shape": e["shape"], "data_offsets": e["data_offsets"],
                         "dtype": e["dtype"]}
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8 + 8)  # padding, at least 8 spaces
    with open(os.path.join(out, "fixture.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(buffer))
    with open(os.path.join(out, "expected.bin"), "wb") as f:
        f.write(bytes(blob))
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"file": "fixture.safetensors", "torch": torch.__version__,
                   "tensors": expected}, f, ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
