"""Read an nvg distill checkpoint (checkpoint-NNNNNN.safetensors) from Python.

    python3 read_checkpoint.py OUT_DIR/checkpoint-000024.safetensors

Needs numpy and, preferably, the safetensors package (pip install safetensors numpy);
without safetensors it parses the file itself (the format is 8 bytes of header length,
a JSON header, then the raw tensors). It checks every CRC-32 the checkpoint records.
"""
import json, struct, sys, zlib
import numpy as np

path = sys.argv[1]
try:
    from safetensors import safe_open
    with safe_open(path, framework="np") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
except ImportError:  # the same by hand
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__")
    data = raw[8 + n:]
    tensors = {k: np.frombuffer(data[e["data_offsets"][0]:e["data_offsets"][1]], "<f4").reshape(e["shape"])
               for k, e in header.items()}

crc = json.loads(meta["nvg.crc32"])
assert int(crc["nvg.meta"], 16) == zlib.crc32(meta["nvg.meta"].encode()), "metadata corrupt"
for name, t in tensors.items():
    assert int(crc[name], 16) == zlib.crc32(np.ascontiguousarray(t, "<f4").tobytes()), name + " corrupt"
state = json.loads(meta["nvg.meta"])
print(f"step {state['step']} of {state['config']['steps']}, last loss {state['loss'][-1]}, "
      f"{len(tensors)} tensors, e.g. {sorted(tensors)[0]} {tensors[sorted(tensors)[0]].shape}")
