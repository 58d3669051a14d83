#!/usr/bin/env python3
"""Held-out perplexity of an HF checkpoint in transformers, on windows nvg chose.

    nvg eval --windows 256 --t 512 --windows-out w.json STUDENT.cmf   # nvg's number + the windows
    nvg export --hf student-hf STUDENT.cmf
    python3 bench/hf_perplexity.py student-hf w.json                  # transformers' number

w.json is {"t": T, "windows": [[T+1 token ids], ...]}: each window scores its last T tokens
from the ones before (the same count nvg eval reports), and the perplexity is
exp(sum of NLL / count). Runs in float32 on CUDA when available (eager attention), else CPU.
Prints one line `RESULT {json}`. Needs torch and transformers 5.x (Qwen3.5).
"""
import json
import math
import sys
import time


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: hf_perplexity.py HF_DIR WINDOWS.json")
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        sys.exit(f"hf_perplexity.py needs PyTorch and transformers 5.x (Qwen3.5): {e}")
    model_dir, windows_path = sys.argv[1], sys.argv[2]
    spec = json.load(open(windows_path))
    windows = spec["windows"]
    if not windows or any(len(w) != spec["t"] + 1 for w in windows):
        sys.exit(f"{windows_path}: want windows of t+1 = {spec['t'] + 1} token ids")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").to(dev).eval()
    nll, count, start = 0.0, 0, time.time()
    batch = 16
    with torch.no_grad():
        for i in range(0, len(windows), batch):
            ids = torch.tensor(windows[i:i + batch], device=dev)
            logits = model(input_ids=ids[:, :-1]).logits.float()
            lp = torch.log_softmax(logits, dim=-1)
            tok = lp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
            nll -= tok.double().sum().item()
            count += tok.numel()
    loss = nll / count
    print("RESULT " + json.dumps({"model": model_dir, "windows": len(windows), "t": spec["t"], "tokens": count,
                                  "loss_nats": loss, "perplexity": math.exp(loss), "seconds": time.time() - start,
                                  "device": dev}))


if __name__ == "__main__":
    main()
