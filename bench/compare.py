#!/usr/bin/env python3
"""Join benchmark JSON lines from rlx and a peer into one side-by-side table.

Usage: python3 bench/compare.py rlx_out.txt torch_out.txt [...]
       (or pipe both outputs on stdin). Non-JSON lines are ignored, so raw
       benchmark stdout works. Each JSON line is
       {"bench": ..., "case": ..., "value": ..., "unit": ..., "impl": ...};
       rows are (bench, case), columns are impls, `ratio` is rlx / peer
       (higher is better for rates: TFLOP/s, GB/s, tokens/s, ...; lower for ms).
       Lines with bench == "limit" are printed as the hardware limit."""
import json
import sys


def read(stream, rows, order, limits):
    for line in stream:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("bench") == "limit":
            limits.append(r)
            continue
        key = (r.get("bench", "?"), r.get("case", "?"))
        if key not in rows:
            rows[key] = {}
            order.append(key)
        rows[key][r.get("impl", "?")] = r


def main():
    rows, order, limits = {}, [], []
    if len(sys.argv) > 1:
        for path in sys.argv[1:]:
            with open(path) as f:
                read(f, rows, order, limits)
    else:
        read(sys.stdin, rows, order, limits)
    impls = []
    for key in order:
        for impl in rows[key]:
            if impl not in impls:
                impls.append(impl)
    impls.sort(key=lambda i: (i != "rlx", i))
    # The peer is torch when present (other rlx variants are extra columns).
    peer = "torch" if "torch" in impls else next((i for i in impls if i != "rlx"), None)
    width = max([len(k[1]) for k in order] + [10])
    print(f"{'case':{width}s} " + " ".join(f"{i:>12s}" for i in impls) + f" {'unit':>9s} {'ratio':>7s}")
    for key in order:
        r = rows[key]
        unit = next(iter(r.values())).get("unit", "")
        cells = " ".join(f"{r[i]['value']:12.4g}" if i in r else f"{'-':>12s}" for i in impls)
        ratio = "-"
        if peer and "rlx" in r and peer in r and r[peer]["value"] and r["rlx"]["value"]:
            x = r["rlx"]["value"] / r[peer]["value"]
            if unit in ("ms", "us", "s"):
                x = 1.0 / x
            ratio = f"{x:.2f}x"
        print(f"{key[1]:{width}s} {cells} {unit:>9s} {ratio:>7s}")
    for lim in limits:
        print(f"hardware limit: {lim.get('case')}: {lim.get('value'):.4g} {lim.get('unit')} ({lim.get('impl')})")


if __name__ == "__main__":
    main()
