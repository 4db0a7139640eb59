"""Bit-exact helpers the fixture scripts share: a tensor from given bit patterns, and the
bytes torch holds for a tensor (read through the same-size integer dtype, so that NaN
payloads and signed zeros survive)."""
import numpy as np
import torch

# The same-size integer dtype of each dtype the fixtures write.
INT_VIEW = {
    torch.bfloat16: torch.int16,
    torch.float16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
    torch.int64: torch.int64,
    torch.int32: torch.int32,
    torch.uint8: torch.uint8,
}


def from_bits(bits, np_uint, np_int, dtype):
    """A 1-d tensor of `dtype` holding exactly the given bit patterns."""
    a = np.array(bits, dtype=np_uint).view(np_int)
    return torch.from_numpy(a.copy()).view(dtype)


def raw_bytes(t):
    """torch's own bytes of t (contiguous, little-endian on this host)."""
    return t.contiguous().view(INT_VIEW[t.dtype]).numpy().tobytes()
