#!/usr/bin/env python3
"""Load generator for embedding servers that speak text-embeddings-inference's
POST /embed (rlx serve, TEI itself): N concurrent clients, each sending R
requests of B texts over one keep-alive connection. Prints texts/s and request
latency percentiles, plus a JSON line for bench/compare.py. Point it at rlx and
at TEI on the same machine and model to compare them:

  build/release/cli/rlx serve --port 8080 &
  python3 bench/serve_bench.py --url http://127.0.0.1:8080 --impl rlx
  python3 bench/serve_bench.py --url http://127.0.0.1:3000 --impl tei

--start-rlx BINARY starts `BINARY serve` on a free port first (and stops it
after). Texts come from --texts FILE (one per line) or a built-in mix of
lengths (5-120 words); each request takes the next B of them.
"""
import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

WORDS = ("the quick brown fox jumps over a lazy dog while committee members debate budget items "
         "for next year rainfall patterns shift across northern regions and markets respond").split()


def builtin_texts(n=2000):
    out = []
    for i in range(n):
        k = 5 + (i * 37) % 116
        out.append(" ".join(WORDS[(i + j * 7) % len(WORDS)] for j in range(k)))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(host, port, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        try:
            c = http.client.HTTPConnection(host, port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"serve_bench: no healthy server at {host}:{port} after {timeout} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--impl", default="rlx", help="name printed beside the figures (rlx, tei, ...)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=20, help="requests per client")
    ap.add_argument("--batch", type=int, default=4, help="texts per request")
    ap.add_argument("--texts", help="file with one text per line")
    ap.add_argument("--start-rlx", metavar="BINARY", help="start BINARY serve on a free port first")
    ap.add_argument("--serve-args", default="", help="extra arguments for --start-rlx (e.g. '--device cpu')")
    a = ap.parse_args()

    server = None
    if a.start_rlx:
        port = free_port()
        server = subprocess.Popen([a.start_rlx, "serve", "--port", str(port)] + a.serve_args.split(),
                                  stderr=subprocess.PIPE, text=True)
        host = "127.0.0.1"
    else:
        u = urllib.parse.urlparse(a.url)
        host, port = u.hostname, u.port or 80
    try:
        wait_healthy(host, port)
        texts = [l.rstrip("\n") for l in open(a.texts, encoding="utf-8")] if a.texts else builtin_texts()
        texts = [t for t in texts if t] or builtin_texts()
        latencies, done, errors = [], [0], []
        lock = threading.Lock()

        def client(i):
            conn = http.client.HTTPConnection(host, port, timeout=300)
            for r in range(a.requests):
                at = (i * a.requests + r) * a.batch
                batch = [texts[(at + j) % len(texts)] for j in range(a.batch)]
                t0 = time.perf_counter()
                conn.request("POST", "/embed", body=json.dumps({"inputs": batch}),
                             headers={"Content-Type": "application/json"})
                res = conn.getresponse()
                body = res.read()
                dt = time.perf_counter() - t0
                with lock:
                    if res.status != 200 or len(json.loads(body)) != len(batch):
                        errors.append(f"{res.status}: {body[:200]!r}")
                    latencies.append(dt)
                    done[0] += len(batch)

        # One warm-up request compiles the shapes outside the timed part.
        warm = http.client.HTTPConnection(host, port, timeout=300)
        warm.request("POST", "/embed", body=json.dumps({"inputs": texts[:a.batch]}),
                     headers={"Content-Type": "application/json"})
        warm.getresponse().read()
        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        if errors:
            sys.exit(f"serve_bench: {len(errors)} failed requests, first: {errors[0]}")
        lat = sorted(latencies)
        p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3
        rate = done[0] / wall
        print(f"{a.impl}: {a.clients} clients x {a.requests} requests x {a.batch} texts: {done[0]} texts in "
              f"{wall:.2f} s = {rate:.0f} texts/s; latency p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms, "
              f"mean {statistics.mean(lat) * 1e3:.1f} ms")
        print(json.dumps({"bench": "serve", "case": f"{a.clients}x{a.requests}x{a.batch}", "value": rate,
                          "unit": "texts/s", "impl": a.impl}))
    finally:
        if server:
            server.send_signal(signal.SIGINT)
            try:
                _, err = server.communicate(timeout=30)
                sys.stderr.write(err)
            except subprocess.TimeoutExpired:
                server.kill()


if __name__ == "__main__":
    main()
