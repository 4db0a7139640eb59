"""Writes what a PyTorch user would have, from parity's own files, with the real writers.

Used by tests/test_cli_external.cpp (Debian's python3 with python3-torch, python3-h5py and
python3-numpy):

  export_run.py dump DUMP_FILE STEP OUT_PREFIX [DUMP_FILE STEP OUT_PREFIX ...]
      the step's grads and params of a parity dump (an HDF5 file read with h5py; fp32 or fp64
      tensors) as OUT_PREFIX.pt (torch.save of {"grads": {...}, "params": {...}}),
      OUT_PREFIX.safetensors (one flat file, names "grads.<fqn>" / "params.<fqn>", written by
      hand from the specification) and OUT_PREFIX.h5 (h5py, groups grads/ and params/); also
      OUT_PREFIX.bf16.pt (the gradients alone, cast to bf16: a bf16 run's own dtype) and
      OUT_PREFIX.part0.pt / OUT_PREFIX.part1.pt (the tensors in two halves, as two ranks of
      one run would save them).
  export_run.py state-dict CHECKPOINT OUT_PREFIX [bad]
      a parity checkpoint's parameters as a raw state_dict (an OrderedDict, the way
      model.state_dict() comes) in OUT_PREFIX.pt and OUT_PREFIX.safetensors, plus an expert
      bias (zero, as the checkpoint's) that init --from takes and a vision tensor it must skip;
      with `bad`, one key missing, one extra
      and one mis-shaped. The same as DCP checkpoints (tests/py/dcp_writer.py): OUT_PREFIX.dcp,
      one chunk a tensor, and OUT_PREFIX.dcp-sharded, the keys under "model." beside an
      optimizer tensor, tensors of two or more rows in two chunks over two data files.
  export_run.py expert-bias CHECKPOINT OUT_PREFIX
      a parity checkpoint's parameters as torch.save state dicts whose expert biases force every
      token of every MoE layer onto the last two experts: OUT_PREFIX.biased.pt (each
      expert_bias_E is 10 on those two, 0 elsewhere: sigmoid scores lie in (0, 1), so the two
      biased ones always lead), OUT_PREFIX.biased-junk.pt (the same, with the other experts'
      weights multiplied by -3) and OUT_PREFIX.junk.pt (those weights, no expert_bias_E).
  export_run.py tokens TOKEN_FILE OUT_PREFIX
      the ids of a parity token file (32-byte header, then int32 ids) as OUT_PREFIX.u16.npy,
      OUT_PREFIX.i32.npy, OUT_PREFIX.i64.npy and a raw uint16 OUT_PREFIX.bin.
  export_run.py positions TOKEN_FILE SEQ_LEN OUT_NPY
      per-token positions for the same ids cut into windows of SEQ_LEN + 1 tokens (int64):
      0 at each window's first token and after each EOS (id 2), else one more than the token
      before, as a dataloader that restarts positions per document emits them.
  export_run.py small OUT_PREFIX
      a few small tensors of every float dtype, nested, as OUT_PREFIX.pt, OUT_PREFIX.safetensors
      and OUT_PREFIX.h5, and a few token ids as OUT_PREFIX.npy: the seeds of a fuzz pass.
"""
import collections
import json
import struct
import sys

import h5py
import numpy as np
import torch

import dcp_writer


def write_safetensors(path, tensors):
    """tensors: list of (name, torch tensor); F32/F64/BF16 as the tensor's dtype says."""
    dtypes = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16",
              torch.float16: "F16"}
    header, chunks, offset = {}, [], 0
    for name, t in tensors:
        t = t.contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if t.element_size() == 2 \
            else t.numpy().tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def write_formats(prefix, grads, params):
    """{"grads": ..., "params": ...} as PREFIX.pt (torch.save, nested), PREFIX.safetensors (flat,
    "grads.<fqn>") and PREFIX.h5 (h5py, groups; bf16, which HDF5 lacks, widened to fp32)."""
    torch.save({"grads": grads, "params": params}, prefix + ".pt")
    flat = [("grads." + k, v) for k, v in grads.items()] + \
           [("params." + k, v) for k, v in params.items()]
    write_safetensors(prefix + ".safetensors", flat)
    with h5py.File(prefix + ".h5", "w") as f:
        for group, tensors in (("grads/", grads), ("params/", params)):
            for k, v in tensors.items():
                f.create_dataset(group + k, data=(v.float() if v.dtype == torch.bfloat16 else v).numpy())


def read_group(group):
    return {name: torch.from_numpy(np.array(group[name])) for name in group}


def export_dump(dump, step, prefix):
    with h5py.File(dump, "r") as f:
        g = f["step_%06d" % int(step)]
        grads, params = read_group(g["grads"]), read_group(g["params"])
    write_formats(prefix, grads, params)
    torch.save({"grads": {k: v.to(torch.bfloat16) for k, v in grads.items()}},
               prefix + ".bf16.pt")
    names = sorted(grads)
    half = len(names) // 2
    for part, chosen in enumerate((names[:half], names[half:])):
        torch.save({"grads": {k: grads[k] for k in chosen},
                    "params": {k: params[k] for k in chosen}}, prefix + ".part%d.pt" % part)


def export_state_dict(checkpoint, prefix, bad):
    with h5py.File(checkpoint, "r") as f:
        params = read_group(f["params"])
    sd = collections.OrderedDict()
    for k, v in params.items():
        sd[k] = v
    # What a torchtitan state dict holds beyond the text parameters.
    sd["layers.1.moe.expert_bias_E"] = torch.zeros(4)
    sd["vision_encoder.patch_embed.weight"] = torch.zeros(8, 3)
    if bad:
        del sd["norm.weight"]
        sd["layers.0.extra.weight"] = torch.zeros(2)
        sd["lm_head.weight"] = torch.zeros(3, 3)
    sd._metadata = collections.OrderedDict({"": {"version": 1}})
    torch.save(sd, prefix + ".pt")
    write_safetensors(prefix + ".safetensors", list(sd.items()))
    # DCP: the state dict as a newer torchtitan saves a seed checkpoint (one chunk a tensor),
    # and as an older one saves a whole training state (model. keys beside the optimizer's),
    # each tensor of two or more rows in two chunks over two data files.
    dcp_writer.write_dcp(prefix + ".dcp", list(sd.items()))
    whole = [("model." + k, v) for k, v in sd.items()]
    whole.append(("optimizer.state.lm_head.weight.exp_avg", torch.zeros(3)))
    dcp_writer.write_dcp(prefix + ".dcp-sharded", whole,
                         {k: 2 for k, v in whole if v.dim() > 0 and v.shape[0] >= 2})


def export_expert_bias(checkpoint, prefix):
    with h5py.File(checkpoint, "r") as f:
        params = read_group(f["params"])
    layers = sorted(k[:-len("routed_experts.w13.weight")] for k in params
                    if k.endswith(".moe.routed_experts.w13.weight"))
    assert layers, "the checkpoint has no MoE layer"

    def state_dict(biased, junk):
        sd = collections.OrderedDict()
        for k, v in params.items():
            sd[k] = v.clone()
        for moe in layers:
            experts = sd[moe + "routed_experts.w13.weight"].shape[0]
            if junk:
                for w in ("routed_experts.w13.weight", "routed_experts.w2.weight"):
                    sd[moe + w][:experts - 2] *= -3
            if biased:
                bias = torch.zeros(experts, dtype=torch.float32)
                bias[experts - 2:] = 10
                sd[moe + "expert_bias_E"] = bias
        return sd

    torch.save(state_dict(True, False), prefix + ".biased.pt")
    torch.save(state_dict(True, True), prefix + ".biased-junk.pt")
    torch.save(state_dict(False, True), prefix + ".junk.pt")


def export_tokens(token_file, prefix):
    with open(token_file, "rb") as f:
        header = f.read(32)
        (count,) = struct.unpack("<Q", header[8:16])
        ids = np.frombuffer(f.read(4 * count), dtype="<i4")
    np.save(prefix + ".u16.npy", ids.astype("<u2"))
    np.save(prefix + ".i32.npy", ids.astype("<i4"))
    np.save(prefix + ".i64.npy", ids.astype("<i8"))
    ids.astype("<u2").tofile(prefix + ".bin")


def export_positions(token_file, seq_len, out):
    with open(token_file, "rb") as f:
        header = f.read(32)
        (count,) = struct.unpack("<Q", header[8:16])
        ids = np.frombuffer(f.read(4 * count), dtype="<i4")
    width = seq_len + 1
    pos = np.zeros(len(ids), dtype="<i8")
    for i in range(len(ids)):
        if i % width != 0 and ids[i - 1] != 2:
            pos[i] = pos[i - 1] + 1
    np.save(out, pos)


def export_small(prefix):
    g = torch.Generator().manual_seed(5)
    grads = {"a.weight": torch.randn(3, 4, generator=g).to(torch.bfloat16),
             "b.weight": torch.randn(5, generator=g).to(torch.float16),
             "c.bias": torch.randn(2, 2, generator=g)}
    params = {"a.weight": torch.randn(3, 4, generator=g, dtype=torch.float64)}
    write_formats(prefix, grads, params)
    np.save(prefix + ".npy", np.arange(1, 200, dtype="<i4") % 97)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "dump":
        # one or more DUMP_FILE STEP OUT_PREFIX triples (one start of Python for many runs)
        args = sys.argv[2:]
        if not args or len(args) % 3:
            sys.exit("dump takes DUMP_FILE STEP OUT_PREFIX triples")
        for i in range(0, len(args), 3):
            export_dump(args[i], args[i + 1], args[i + 2])
    elif cmd == "state-dict":
        export_state_dict(sys.argv[2], sys.argv[3], len(sys.argv) > 4 and sys.argv[4] == "bad")
    elif cmd == "expert-bias":
        export_expert_bias(sys.argv[2], sys.argv[3])
    elif cmd == "small":
        export_small(sys.argv[2])
    elif cmd == "tokens":
        export_tokens(sys.argv[2], sys.argv[3])
    elif cmd == "positions":
        export_positions(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit("unknown command " + cmd)
