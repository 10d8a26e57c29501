#!/usr/bin/env python3
"""Generates tests/data/unigram_cases.json: Hugging Face `tokenizers` ids for
SentencePiece Unigram tokenizers in the shapes XLM-RoBERTa and the multilingual
sentence-transformers models ship. tests/unit/tokenizers/test_unigram.cpp
asserts that rlx's UnigramTokenizer gives exactly these ids.

Two tiny SentencePiece unigram models are trained on the multilingual corpus
below: one with the "nmt_nfkc" rule (so it carries a real precompiled_charsmap)
and one with "identity". Each is converted to a tokenizer.json the way
transformers converts XLM-RoBERTa (XLMRobertaConverter, special tokens as
XLMRobertaTokenizer registers them), then varied to cover the other forms found
in published tokenizer.json files: legacy Metaspace add_prefix_space,
WhitespaceSplit + Metaspace, RobertaProcessing, a padding section, Replace with
a plain string, Strip, NFKC, Lowercase, prepend_scheme first/never, split false,
normalized and rstrip added tokens.

Fixture layout (kept small: the charsmap is stored once):
  charsmap: base64 precompiled_charsmap of the nmt_nfkc model; every string
            "@charsmap" inside a tokenizer stands for it
  bases:    {name: tokenizer.json as written by `tokenizers`}
  tokenizers: [{name, base, override: top-level keys replacing the base's,
                ids: [per text, untruncated],
                trunc: [per text, `tokenizers`' own truncation to TRUNC_LENGTH (longest first, specials kept)]}]
  texts:    the texts, shared by every tokenizer

Usage: pip install tokenizers transformers sentencepiece protobuf
       python3 tests/data/gen_unigram_cases.py [--random N --seed S --out PATH]
"""
import argparse
import copy
import io
import json
import os
import random
import sys
import tempfile

import sentencepiece as spm
import tokenizers
import transformers
from tokenizers import AddedToken, Tokenizer
from transformers.convert_slow_tokenizer import XLMRobertaConverter

TRUNC_LENGTH = 10
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unigram_cases.json")

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Sentence embeddings map whole sentences to dense vectors for semantic search.",
    "Le café est très bon ce matin, n'est-ce pas ? Où est la bibliothèque ?",
    "Die Größe der Straße überrascht die Bürger; Äpfel und Öl sind teuer.",
    "El niño comió una manzana y bebió agua fría en la mañana.",
    "São Paulo é a maior cidade do Brasil, com milhões de habitantes.",
    "Zażółć gęślą jaźń. Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Привет, как дела? Москва — столица России. Съешь же ещё этих мягких булок.",
    "Україна, Київ, їжак і ґанок. Беларусь і Мінск.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από το τεμπέλικο σκυλί.",
    "東京は日本の首都です。私は毎朝コーヒーを飲みます。",
    "我们今天去北京大学学习中文，天气很好。",
    "한국어 문장을 토큰화합니다. 서울은 대한민국의 수도입니다.",
    "مرحبا بالعالم. اللغة العربية جميلة جدا.",
    "שלום עולם, מה שלומך היום?",
    "नमस्ते दुनिया, हिन्दी भाषा सुंदर है। क्षत्रिय",
    "สวัสดีครับ ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Tiếng Việt có rất nhiều dấu thanh điệu và chữ cái đặc biệt.",
    "Türkçe ılık şırınga; İstanbul güzel bir şehir.",
    "Numbers: 0123456789, 3.14159, 1,000,000 and 42% of $19.99.",
    "Full-width: ＡＢＣ ａｂｃ １２３ ！？ and half-width ｶﾀｶﾅ.",
    "Ligatures: ﬁnance ﬂow ﬀ, roman Ⅻ, circled ① ② ③, ㎏ ㎞ ℃ ™.",
    "Emoji: 😀 😂 👍🏽 ❤️ 🇫🇷 👨‍👩‍👧 ✨ 🚀",
    "Tabs\tand\nnewlines\r\nand   multiple    spaces.",
    "email me at someone@example.com or visit https://example.org/path?q=1",
    "C++ code: for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "Combining: e\u0301 a\u0300 o\u0308 n\u0303 and precomposed é à ö ñ.",
    "Ελληνικά, русский, 日本語, and English in one line.",
    "The year 2024 had 366 days; 2023 had 365.",
    "Machine learning models learn representations from data.",
]


SYLLABLES = [
    "ka ri to na mo se lu pe an er in on st re de ch sch qu ou ai ei au".split(),
    "ка ро ми ст но ве ль ра ти за пр ск ов ие ый".split(),
    "κα λο με τα πο ρι νε ση".split(),
    "か き く さ し す た な に の ま り る ん こ と".split(),
    "가 나 다 라 마 바 사 아 자 하 한 국 서 울".split(),
    "ال م ن ب ت ر س ل ك".split(),
]


def corpus(seed):
    """The sentences, then seeded word salads and pseudo-words so the trainer finds ~1000 pieces."""
    rng = random.Random(seed)
    words = " ".join(SENTENCES).split()
    lines = list(SENTENCES) * 3
    for _ in range(1500):
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 14))))
    for _ in range(1500):
        script = rng.choice(SYLLABLES)
        lines.append(" ".join("".join(rng.choice(script) for _ in range(rng.randint(1, 4)))
                              for _ in range(rng.randint(3, 10))))
    return lines


def train(rule, vocab_size, coverage, seed):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus(seed)), model_writer=model, model_type="unigram", vocab_size=vocab_size,
        hard_vocab_limit=False, character_coverage=coverage, normalization_rule_name=rule,
        seed_sentencepiece_size=20000, num_threads=1, minloglevel=2)
    return model.getvalue()


class SlowStandIn:
    """What XLMRobertaConverter reads from a slow XLMRobertaTokenizer."""

    add_prefix_space = True
    legacy = True

    def __init__(self, vocab_file):
        self.vocab_file = vocab_file

    def convert_tokens_to_ids(self, token):
        return {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}[token]


def convert(model_bytes, path):
    with open(path, "wb") as f:
        f.write(model_bytes)
    tok = XLMRobertaConverter(SlowStandIn(path)).converted()
    # XLMRobertaTokenizer's special tokens; <mask> strips the space before it.
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in ("<s>", "<pad>", "</s>", "<unk>")] +
                           [AddedToken("<mask>", lstrip=True, normalized=False, special=True)])
    return json.loads(tok.to_str())


def metaspace(**kw):
    return dict({"type": "Metaspace", "replacement": "\u2581"}, **kw)


def roberta():
    return {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": True,
            "add_prefix_space": True}


def variants(bases):
    ident = bases["identity"]
    precompiled = {"type": "Precompiled", "precompiled_charsmap": "@charsmap"}
    collapse_to_space = {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}
    extra_added = copy.deepcopy(ident["added_tokens"]) + [
        {"id": len(ident["model"]["vocab"]), "content": "New York", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": True, "special": False},
        {"id": len(ident["model"]["vocab"]) + 1, "content": "[SEP2]", "single_word": False, "lstrip": False,
         "rstrip": True, "normalized": False, "special": True},
    ]
    return [
        # As transformers converts XLM-R today: Precompiled, Strip right, " {2,}" → ▁.
        ("xlmr", "nfkc", {}),
        # Older hub files (paraphrase-multilingual-*): Precompiled alone, WhitespaceSplit + legacy Metaspace.
        ("hub_legacy", "nfkc", {
            "normalizer": precompiled,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "WhitespaceSplit"}, metaspace(add_prefix_space=True, str_rep="\u2581")]},
            "post_processor": roberta(),
            "padding": {"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None, "pad_id": 1,
                        "pad_type_id": 0, "pad_token": "<pad>"},
        }),
        # bge-m3 / multilingual-e5 shape: Precompiled + " {2,}" → " ", Metaspace always.
        ("bge", "nfkc", {
            "normalizer": {"type": "Sequence", "normalizers": [precompiled, collapse_to_space]},
            "pre_tokenizer": metaspace(prepend_scheme="always", split=True),
        }),
        ("first_nosplit", "nfkc", {"pre_tokenizer": metaspace(prepend_scheme="first", split=False)}),
        ("identity_xlmr", "identity", {}),
        ("identity_nfkc_lower", "identity", {
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFKC"}, {"type": "Lowercase"},
                {"type": "Replace", "pattern": {"String": "ss"}, "content": "\u00df"},
                {"type": "Strip", "strip_left": True, "strip_right": True}]},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "WhitespaceSplit"}, metaspace(prepend_scheme="always", split=True)]},
            "added_tokens": extra_added,
        }),
        # prepend_scheme "first" after normalizers that move the text's start.
        ("identity_first_ws", "identity", {
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Strip", "strip_left": True, "strip_right": False},
                {"type": "Replace", "pattern": {"String": "q"}, "content": ""}, collapse_to_space]},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "WhitespaceSplit"}, metaspace(prepend_scheme="first", split=True)]},
        }),
        ("identity_first_replace", "identity", {
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Replace", "pattern": {"String": "ab"}, "content": "c"},
                {"type": "Replace", "pattern": {"String": "x"}, "content": "yy"},
                {"type": "Replace", "pattern": {"String": "q"}, "content": ""}]},
            "pre_tokenizer": metaspace(prepend_scheme="first", split=True),
        }),
        ("identity_never", "identity", {"normalizer": None, "pre_tokenizer": metaspace(prepend_scheme="never")}),
    ]


HAND_WRITTEN = SENTENCES + [
    "",
    " ",
    "     ",
    "\t\n",
    "a",
    "hello",
    "  leading and trailing  ",
    "double  space and triple   space",
    "<s>",
    "</s>",
    "<s>hello</s>",
    "text with <mask> inside",
    "text with     <mask>    spaces",
    "<mask>at start",
    "<pad><unk><mask>",
    "literal <s and s> and </ s>",
    "\u2581already\u2581has\u2581meta\u2581spaces",
    "\u2581",
    "\u2581\u2581 \u2581",
    "New York is in new york, NEW YORK!",
    "[SEP2]   after sep2 [SEP2]x",
    "Strasse Straße STRASSE",
    "ﬁ\u0301 A\u0302\u0300 A\u0302\u0300x a\u0302\u0300\u0301 e\u0301",
    "Tie\u0302\u0301ng Vie\u0323\u0302t Tiê\u0301ng",  # clusters with two key prefixes: HF takes the shorter
    "\r\n\r\n\r",
    "a\u200bb\u200cc\u200dd\ufeffe\u00adf",
    "zero\u0000byte",
    "control\u0001\u0002\u007f\u0085chars",
    "nbsp\u00a0ideographic\u3000em\u2003line\u2028para\u2029",
    "ｶﾞｷﾞｸﾞ ﾊﾟﾋﾟ",
    "\u1100\u1161\u11a8 \u1105\u315f\u3136 \uac00\u0301",
    "👨\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈 🇺🇸🇬🇧🇯",
    "\u0600\u0661\u0662 \u0915\u094d\u0937",
    "rare: \U0001f9ec \U00010348 \ue000 \U0010fffd ꙮ ᚠᛇᚻ ⵜⴰⵎⴰⵣⵉⵖⵜ",
    "unknownchars: ᚠᛇᚻ᛫ᛒᛦᚦ ⵜⴰⵎⴰⵣⵉⵖⵜ ꙮꙮꙮ",
    "abc", "xylophone", "qtip", "q", "x", "ab", "  spaced out", "\u200bhello", "\u0001hello", "<s>abc",
    "text<mask>ab", "ﬁrst", "\t tab first",
    "a" * 300,
    "supercalifragilisticexpialidocious" * 5,
    "日本語" * 40,
    " ".join(SENTENCES),
]

TRICKY = [
    "a", "b", "e", "s", "S", "x", "A", "Z", "0", "7", " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000",
    "\u2003", "\u200b", "\u00ad", "\ufeff", "\u0001", "\u007f", "\u0000", "\u0301", "\u0300", "\u0302", "\u0308",
    "\u0303", "é", "ñ", "ö", "ß", "ẞ", "İ", "ı", "ﬁ", "ﬂ", "Ⅻ", "①", "㎏", "℃", "™", "Ａ", "ａ", "１", "！", "ｶ", "ﾞ",
    "日", "本", "語", "中", "文", "\u1100", "\u1161", "\u11a8", "\uac00", "\u315f", "Д", "ж", "Ё", "ї", "α", "Ω", "ς",
    "م", "ر", "ح", "\u0600", "ש", "ा", "क", "\u094d", "ष", "ไ", "ก", "😀", "👍", "\U0001f3fd", "\u200d", "\ufe0f",
    "🇫", "🇷", "❤", "▁", "<s>", "</s>", "<mask>", "<pad>", "<unk>", "<", ">", "/", ".", ",", "!", "?", "-", "'",
    "the", "ing", "tion", "Москва", "café", "Straße", "東京", "ᚠ", "ꙮ", "\U0001f9ec", "\ue000", "New York", "[SEP2]",
    "ss", "q", "ab",
]


def random_texts(n, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(TRICKY) for _ in range(rng.randint(1, 30))) for _ in range(n)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--random", type=int, default=150, help="seeded random texts (more for a stress run)")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        nfkc_model = train("nmt_nfkc", 1000, 0.995, seed=1)
        ident_model = train("identity", 600, 0.98, seed=2)
        bases = {"nfkc": convert(nfkc_model, os.path.join(tmp, "nfkc.model")),
                 "identity": convert(ident_model, os.path.join(tmp, "identity.model"))}
    charsmap = bases["nfkc"]["normalizer"]["normalizers"][0]["precompiled_charsmap"]
    assert bases["nfkc"]["normalizer"]["normalizers"][0]["type"] == "Precompiled"
    bases["nfkc"]["normalizer"]["normalizers"][0]["precompiled_charsmap"] = "@charsmap"

    texts = HAND_WRITTEN + random_texts(args.random, seed=args.seed)

    def resolve(node):
        if node == "@charsmap":
            return charsmap
        if isinstance(node, dict):
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    entries = []
    for name, base, override in variants(bases):
        full = resolve(dict(bases[base], **override))
        tok = Tokenizer.from_str(json.dumps(full))
        ids = [tok.encode(t).ids for t in texts]
        tok.enable_truncation(TRUNC_LENGTH)
        trunc = [tok.encode(t).ids for t in texts]
        entries.append({"name": name, "base": base, "override": override, "ids": ids, "trunc": trunc})
        unk = full["model"]["unk_id"]
        print(f"{name}: {sum(map(len, ids))} ids, {sum(i.count(unk) for i in ids)} unk", file=sys.stderr)

    fixture = {
        "generator": "tests/data/gen_unigram_cases.py",
        "versions": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
                     "sentencepiece": spm.__version__},
        "trunc_length": TRUNC_LENGTH,
        "charsmap": charsmap,
        "bases": bases,
        "texts": texts,
        "tokenizers": entries,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out}: {os.path.getsize(args.out)} bytes, {len(texts)} texts × {len(entries)} tokenizers",
          file=sys.stderr)


if __name__ == "__main__":
    main()
