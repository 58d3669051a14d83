"""Exits non-zero when an executed notebook holds an error: an error output, or a stream or
display output whose text looks like a failure (a Go panic, a compiler error, a failed
shell command). Prints each one found."""
import json, re, sys

BAD = re.compile(r"^(panic:|fatal error:|\S+\.go:\d+:\d+: |ERROR|Error:|exit status [1-9])", re.M)

def text(o):
    t = o.get("text") or o.get("data", {}).get("text/plain") or ""
    return "".join(t) if isinstance(t, list) else t

found = 0
for path in sys.argv[1:]:
    nb = json.load(open(path))
    for i, c in enumerate(nb["cells"]):
        for o in c.get("outputs", []):
            if o.get("output_type") == "error":
                found += 1
                print(f"{path}: cell {i}: {o.get('ename')}: {o.get('evalue')}")
                continue
            m = BAD.search(text(o))
            if m:
                found += 1
                line = text(o)[m.start():].splitlines()[0]
                print(f"{path}: cell {i}: {line}")
sys.exit(1 if found else 0)
