#!/usr/bin/env python3
"""PyTorch peer for bench/bert_bench: the same BERT shapes (random weights,
fp16, SDPA attention), eager and torch.compile, timed with CUDA events
(median of many runs after warm-up). Prints a table and JSON lines."""
import json
import sys

import torch
from transformers import BertConfig, BertModel

from torch_timing import median_ms


def time_fn(fn, iters):
    return median_ms(lambda _: fn(), warm=10, iters=iters)


def main():
    torch.manual_seed(0)
    shapes = {"minilm-l6": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
              "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)}
    for label, kw in shapes.items():
        cfg = BertConfig(**kw, attn_implementation="sdpa")
        model = BertModel(cfg, add_pooling_layer=False).cuda().half().eval()
        # "nomask": eager with no attention mask at all, the fastest eager path
        # (SDPA may then pick its flash kernel), so a ratio against it is the
        # harder one; rlx's bench still applies its key-length mask.
        modes = ("eager", "nomask", "compile") if "--compile" in sys.argv else ("eager", "nomask")
        impls = {"eager": "torch", "nomask": "torch-nomask", "compile": "torch-compile"}
        for mode in modes:
            m = torch.compile(model) if mode == "compile" else model
            for B, L in ((1, 16), (256, 128)):
                ids = torch.randint(1000, cfg.vocab_size, (B, L), device="cuda")
                mask = torch.ones(B, L, dtype=torch.long, device="cuda")
                attn = None if mode == "nomask" else mask

                @torch.inference_mode()
                def fwd():
                    h = m(input_ids=ids, attention_mask=attn).last_hidden_state
                    p = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
                    return torch.nn.functional.normalize(p, dim=-1)

                ms = time_fn(fwd, 200 if B == 1 else 50)
                key = f"{label} {B}x{L}"
                print(f"{key:28s} torch-{mode:8s} {ms:9.3f} ms  {B / ms * 1000:10.0f} sentences/s")
                print(json.dumps({"bench": "bert", "case": key, "value": ms, "unit": "ms", "impl": impls[mode]}))


if __name__ == "__main__":
    main()
