"""Checks the files `parity memory` writes with the readers PyTorch users have.

usage: memory_files.py SNAPSHOT TRACE

SNAPSHOT, the allocator snapshot: plain pickle (loaded with pickle, importing nothing), the
structure pytorch.org/memory_viz reads (segments with blocks, device_traces with alloc /
free_requested / free_completed entries), and torch's own reader, torch.cuda._memory_viz:
stats() checks that each segment's blocks add up to its size, segments() with an identity
format_flamegraph walks every block. TRACE, the Chrome trace: JSON trace events with the
documented fields. Prints what it checked; exits 1 naming the first thing that does not hold.
"""
import collections
import json
import pickle
import sys


def fail(msg):
    print("memory_files: " + msg)
    sys.exit(1)


def check_frames(frames, where):
    if not isinstance(frames, list) or not frames:
        fail(where + ": frames is not a non-empty list")
    for f in frames:
        if set(f) != {"filename", "line", "name"}:
            fail(where + ": a frame has keys " + repr(sorted(f)))


def check_snapshot(path):
    with open(path, "rb") as f:
        snap = pickle.load(f)
    if not isinstance(snap, dict) or not {"segments", "device_traces"} <= set(snap):
        fail("the snapshot is not a dict with segments and device_traces")
    segments = snap["segments"]
    blocks = 0
    live_bytes = 0
    for s in segments:
        for k in ("address", "total_size", "stream", "blocks", "segment_type", "device"):
            if k not in s:
                fail("a segment lacks " + k)
        for b in s["blocks"]:
            blocks += 1
            if b["state"] != "active_allocated":
                fail("a live block's state is " + b["state"])
            check_frames(b["frames"], "block")
        live_bytes += s["total_size"]

    from torch.cuda import _memory_viz
    st = _memory_viz.stats(segments)  # asserts each segment's blocks add up to its size
    if st["segments"] != len(segments) or getattr(st["total_size"], "value", st["total_size"]) != live_bytes:
        fail("torch's stats disagree: " + repr(st))
    walked = _memory_viz.segments(segments, format_flamegraph=lambda lines: lines)
    lines = [l for l in walked.splitlines() if l]
    if len(lines) != blocks:
        fail("torch's segments() walked %d lines for %d blocks" % (len(lines), blocks))
    if sum(int(l.rsplit(" ", 1)[1]) for l in lines) != live_bytes:
        fail("torch's segments() lines do not add up to the live bytes")

    traces = snap["device_traces"]
    if len(traces) != 1:
        fail("expected one device's trace, got %d" % len(traces))
    open_blocks = {}
    requested = set()
    allocs = frees = 0
    alloc_bytes = free_bytes = 0
    categories = collections.Counter()
    last_time = -1
    for i, e in enumerate(traces[0]):
        for k in ("action", "addr", "size", "stream", "frames", "time_us", "category"):
            if k not in e:
                fail("trace entry %d lacks %s" % (i, k))
        check_frames(e["frames"], "trace entry %d" % i)
        if e["time_us"] < last_time:
            fail("trace entry %d goes back in time" % i)
        last_time = e["time_us"]
        a, addr = e["action"], e["addr"]
        if a == "alloc":
            if addr in open_blocks:
                fail("trace entry %d allocates a live address" % i)
            open_blocks[addr] = e["size"]
            allocs += 1
            alloc_bytes += e["size"]
            categories[e["category"]] += 1
        elif a == "free_requested":
            if open_blocks.get(addr) != e["size"] or addr in requested:
                fail("trace entry %d frees what is not allocated" % i)
            requested.add(addr)
        elif a == "free_completed":
            if addr not in requested:
                fail("trace entry %d completes a free never requested" % i)
            requested.discard(addr)
            del open_blocks[addr]
            frees += 1
            free_bytes += e["size"]
        else:
            fail("trace entry %d has action %r" % (i, a))
    if requested:
        fail("frees requested and never completed")
    if allocs - frees != blocks or alloc_bytes - free_bytes != live_bytes:
        fail("allocs (%d, %d bytes) minus frees (%d, %d bytes) are not the %d live blocks "
             "(%d bytes)" % (allocs, alloc_bytes, frees, free_bytes, blocks, live_bytes))
    wanted = {"stack", "partial", "attn_res", "mixer", "ffn", "params", "grads", "optimizer"}
    if not wanted <= set(categories):
        fail("categories missing from the trace: " + repr(sorted(wanted - set(categories))))
    print("snapshot: %d segments, %d live bytes; trace: %d allocs, %d frees; categories %s"
          % (len(segments), live_bytes, allocs, frees, dict(categories)))


def check_trace(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    kinds = collections.Counter()
    for i, e in enumerate(events):
        for k in ("name", "ph", "pid"):
            if k not in e:
                fail("trace event %d lacks %s" % (i, k))
        kinds[e["ph"]] += 1
        if e["ph"] in ("C", "X") and not isinstance(e.get("ts"), (int, float)):
            fail("trace event %d has no numeric ts" % i)
        if e["ph"] == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
            fail("slice %d has no duration" % i)
        if e["ph"] == "C" and not all(isinstance(v, int) and v >= 0 for v in e["args"].values()):
            fail("counter %d holds a value that is not a byte count" % i)
        if e["ph"] not in ("C", "X", "M"):
            fail("trace event %d has phase %r" % (i, e["ph"]))
    layers = [e for e in events if e["ph"] == "X" and e["name"].startswith("forward layer ")]
    if not layers or not kinds["C"] or not kinds["M"]:
        fail("the trace lacks layer slices, counters or process names: " + repr(dict(kinds)))
    print("trace: %s, %d layer slices" % (dict(kinds), len(layers)))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        fail("usage: memory_files.py SNAPSHOT TRACE")
    check_snapshot(sys.argv[1])
    check_trace(sys.argv[2])
