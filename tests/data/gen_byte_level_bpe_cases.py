#!/usr/bin/env python3
"""Generates tests/data/byte_level_bpe_cases.json: Hugging Face `tokenizers` ids
for byte-level BPE tokenizers in the shape RoBERTa and the sentence-transformers
models built on it (all-distilroberta-v1, all-roberta-large-v1) ship.
tests/unit/tokenizers/test_byte_level_bpe.cpp asserts that rlx's
ByteLevelBpeTokenizer gives exactly these ids.

A small byte-level BPE (~1400 tokens) is trained on the varied corpus below and
written as RoBERTa's tokenizer.json is (no normalizer, ByteLevel pre-tokenizer
and decoder, RobertaProcessing, <s> <pad> </s> <unk> in front, <mask> last with
lstrip), then varied to cover the other forms the loader supports: merges as
"a b" strings, normalized added tokens and a padding section,
TemplateProcessing, add_prefix_space, ignore_merges with whole-word tokens the
merges cannot reach, bytes missing from the vocabulary (dropped, unknown, fused
unknown), repeated merges, extra added tokens (rstrip, normalized, outside
the vocabulary), and ModernBERT's NFC normalizer.

Fixture layout:
  base:       the RoBERTa-shaped tokenizer.json as written by `tokenizers`
  tokenizers: [{name, override: top-level keys replacing the base's ("model"
                entries replace the base model's keys one by one),
                ids: [per text, untruncated],
                trunc: [per text, `tokenizers`' own truncation to trunc_length]}]
  texts:      the texts, shared by every tokenizer

Usage: pip install tokenizers transformers
       python3 tests/data/gen_byte_level_bpe_cases.py [--random N --seed S --out PATH]
"""
import argparse
import copy
import json
import os
import random
import sys

import tokenizers
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

TRUNC_LENGTH = 10
VOCAB_SIZE = 1500
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "byte_level_bpe_cases.json")

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Sentence embeddings map whole sentences to dense vectors for semantic search.",
    "I'm sure they're right, but we've said it's late and I'll go; he'd agree, wouldn't you?",
    "DON'T SHOUT: IT'S FINE, WE'VE HEARD. Rock 'n' roll and the '90s.",
    "Le café est très bon ce matin, n'est-ce pas ? Où est la bibliothèque ?",
    "Die Größe der Straße überrascht die Bürger; Äpfel und Öl sind teuer.",
    "Привет, как дела? Москва — столица России.",
    "東京は日本の首都です。私は毎朝コーヒーを飲みます。",
    "我们今天去北京大学学习中文，天气很好。",
    "한국어 문장을 토큰화합니다. 서울은 대한민국의 수도입니다.",
    "مرحبا بالعالم. اللغة العربية جميلة جدا.",
    "नमस्ते दुनिया, हिन्दी भाषा सुंदर है।",
    "Numbers: 0123456789, 3.14159, 1,000,000 and 42% of $19.99 in 2024-05-17 at 10:30.",
    "Emoji: 😀 😂 👍🏽 ❤️ 🇫🇷 👨‍👩‍👧 ✨ 🚀",
    "Tabs\tand\nnewlines\r\nand   multiple    spaces.\n\n\tIndented line.",
    "email me at someone@example.com or visit https://example.org/path?q=1&r=2#frag",
    "def main(argv):\n    for i in range(10):\n        print(f\"{i:>3} {argv[i]!r}\")\n    return 0",
    "C++ code: for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } // done",
    "Combining: e\u0301 a\u0300 o\u0308 n\u0303 and precomposed é à ö ñ.",
    "Machine learning models learn representations from data.",
]

# Characters that are \s (White_Space) for the regex, then ones that are not.
SPACE_OR_NOT = ("\t\u000b\u000c\u0085\u00a0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000"
                "\u180e\u200b\u2060\ufeff\u00ad\u0000\u001c\u001f\u0080\u3164\u2800")

# Whole words the ignore_merges variant adds to the vocabulary without merges. " c!" is a word only when c is
# not \s, and "'T" only if contractions ignored case, so a different split takes a different id.
WHOLE_WORDS = [" tokenization", " embeddings", " representations", "hello", " quick", " Москва", "東京", " 2024",
               "...", "   ", "'T", "'S", "'RE", "'LL"] + [f" {c}!" for c in SPACE_OR_NOT]


def byte_chars():
    """GPT-2's bytes_to_unicode: byte → its byte-level character."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    to_char = {b: chr(b) for b in printable}
    to_char.update({b: chr(256 + k) for k, b in enumerate(b for b in range(256) if b not in to_char)})
    return to_char


def byte_level(text):
    """`text` as byte-level characters."""
    return "".join(byte_chars()[b] for b in text.encode("utf-8"))


def corpus(seed):
    """The sentences, then seeded word salads and numbers so the trainer finds ~1400 tokens."""
    rng = random.Random(seed)
    words = " ".join(SENTENCES).split()
    lines = list(SENTENCES) * 5
    for _ in range(2000):
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 14))))
    for _ in range(300):
        lines.append(" ".join(str(rng.randint(0, 10 ** rng.randint(1, 7))) for _ in range(rng.randint(2, 6))))
    return lines


def train(seed):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False,
                                  special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(seed), trainer)
    return json.loads(tok.to_str())


def added(content, id, lstrip=False, rstrip=False, normalized=False, special=True):
    return {"id": id, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized, "special": special}


def roberta_shape(trained):
    """The trained tokenizer as RoBERTa's tokenizer.json: <mask> appended to the vocabulary with lstrip."""
    j = copy.deepcopy(trained)
    vocab = j["model"]["vocab"]
    mask_id = len(vocab)
    vocab["<mask>"] = mask_id
    j["added_tokens"] = [added(t, vocab[t]) for t in ("<s>", "<pad>", "</s>", "<unk>")] + [
        added("<mask>", mask_id, lstrip=True)]
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    j["post_processor"] = {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": True,
                           "add_prefix_space": False}
    j["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    j["model"].update({"dropout": None, "unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
                       "fuse_unk": False, "byte_fallback": False, "ignore_merges": False})
    return j


def without_chars(model, chars):
    """The model's vocabulary and merges without any token containing one of `chars`."""
    gone = lambda t: any(c in t for c in chars)
    vocab = {t: i for t, i in model["vocab"].items() if not gone(t)}
    merges = [m for m in model["merges"] if not (gone(m[0]) or gone(m[1]))]
    return {"vocab": vocab, "merges": merges}


def variants(base):
    model = base["model"]
    template = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]},
                                   "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}
    # Bytes 0xC3 (Latin-1 letters' lead), 0xD1 (Cyrillic) and 0xF0 0x9F (most emoji start with both, so
    # two unknown bytes in a row) leave the vocabulary.
    missing = without_chars(model, [byte_chars()[b] for b in (0xC3, 0xD1, 0xF0, 0x9F)])
    # The first merges repeated at the end: the library keeps a pair's last rank.
    repeated = model["merges"] + [model["merges"][k] for k in (0, 1, 2, 5, 8, 13, 40)]
    extra_vocab = dict(model["vocab"])
    for word in map(byte_level, WHOLE_WORDS):
        extra_vocab.setdefault(word, len(extra_vocab) + 10)  # ids past a gap
    extra_added = copy.deepcopy(base["added_tokens"]) + [
        added("New York", 5000, normalized=True, special=False),  # outside the vocabulary: the library numbers it
        added("[SEP2]", 5001, rstrip=True),
        added("the", 7, lstrip=True, rstrip=True),  # in the vocabulary: its vocabulary id wins
        added("ork", 5002, normalized=True),  # second pass: only in what the first left
        added("<s>", 3),  # repeated content keeps the first id
        added("k is", 5003),  # first pass: wins over the normalized "New York" in "New York is"
    ]
    return [
        # As transformers writes RoBERTa today: merges as pairs.
        ("roberta", {}),
        # Older hub files: merges as "a b" strings, added tokens normalized, a padding section.
        ("hub_legacy", {
            "model": {"merges": [" ".join(m) for m in model["merges"]]},
            "added_tokens": [dict(t, normalized=True) for t in base["added_tokens"]],
            "padding": {"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None, "pad_id": 1,
                        "pad_type_id": 0, "pad_token": "<pad>"},
        }),
        ("template", {"post_processor": template}),
        ("prefix_space", {"pre_tokenizer": dict(base["pre_tokenizer"], add_prefix_space=True),
                          "post_processor": dict(base["post_processor"], add_prefix_space=True)}),
        ("ignore_merges", {"model": {"ignore_merges": True, "vocab": extra_vocab}}),
        ("whole_words_merged", {"model": {"vocab": extra_vocab}}),
        ("missing_dropped", {"model": missing}),
        ("missing_unk", {"model": dict(missing, unk_token="<unk>")}),
        ("missing_fused", {"model": dict(missing, unk_token="<unk>", fuse_unk=True)}),
        ("repeated_merges", {"model": {"merges": repeated}}),
        ("extra_added", {"added_tokens": extra_added}),
        # ModernBERT's shape: NFC before the pre-tokenizer, [CLS] … [SEP] by a template (here <s> … </s>).
        ("nfc_template", {"normalizer": {"type": "NFC"}, "post_processor": template,
                          "added_tokens": extra_added}),
        ("nfc_sequence", {"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}]}}),
    ]


def apply(base, override):
    j = copy.deepcopy(base)
    for key, value in override.items():
        if key == "model":
            j["model"].update(value)
        else:
            j[key] = value
    return j


HAND_WRITTEN = SENTENCES + [
    "",
    " ",
    "     ",
    "\t",
    "\n",
    "\t\n \r\n",
    "a",
    "hello",
    "Hello, world!",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "double  space and triple   space",
    "tab\tinside and\t\ttwo tabs",
    "newline\nand\n\nblank line\r\n\r\nCRLF",
    "space before newline \nand after\n word",
    "<s>",
    "</s>",
    "<s>hello</s>",
    "<pad><unk><mask>",
    "<mask>",
    " <mask>",
    "   <mask>",
    "text with <mask> inside",
    "text with     <mask>    spaces",
    "text\t\n <mask>\ttab newline",
    "<mask>at start",
    "text<mask>ab",
    "é<mask>",
    "é <mask>",
    "日本 <mask>",
    "nbsp\u00a0<mask> ideographic\u3000<mask>",
    "<mask><mask> <mask>  <mask>",
    "<s> <mask> </s>",
    "word<s>inside and in<s>side</s>too",
    "literal <s and s> and </ s> and <mask and mask>",
    "<<s>> <</s>> <mask>>",
    "don't can't won't I'm you're we've they'll he'd",
    "DON'T CAN'T I'M YOU'RE WE'VE THEY'LL HE'D",
    "'s 't 're 've 'm 'll 'd ' '' '''s 'x 'S",
    "rock'n'roll o'clock 'quoted' \"double\"",
    "x's y'all z're!'s",
    "numbers 1 12 123 1234 12345 123456 3.14 -2 +7 1e10 0x1F",
    "½ ² ³ ¼ Ⅻ ① ⑳ ٣ ٤ ۵ ๓ 〇 𝟘 𝟙",
    "mixed: abc123def 123abc abc-123 a1b2c3 ١٢٣abc",
    "punctuation!!! ??? ... --- *** ;;; ::: ((())) [[]] {{}}",
    "a.b,c;d:e!f?g",
    "$100 €200 £300 ¥400 ₹500 ₿600",
    "supercalifragilisticexpialidocious",
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "antidisestablishmentarianism counterrevolutionaries",
    "Ünïcödé Çharàctérs ẞtraße ﬁnance ﬂow",
    "Ελληνικά, русский, 日本語, and English in one line.",
    "Tiếng Việt có rất nhiều dấu thanh điệu.",
    "Türkçe ılık şırınga; İstanbul güzel.",
    "Zażółć gęślą jaźń. Příliš žluťoučký kůň.",
    "שלום עולם, מה שלומך?",
    "สวัสดีครับ ภาษาไทย",
    "ʰʲʷ ˈstɹɛs ˌsɛkəndɛɹi",
    "a\u200bb\u200cc\u200dd\ufeffe\u00adf",
    "zero\u0000byte and\u0001control\u007fchars\u0085next",
    "spaces: \u00a0\u1680\u2000\u2001\u2002\u2003\u2009\u200a\u2028\u2029\u202f\u205f\u3000 end",
    "not spaces: \u180e\u200b\u2060\ufeff end",
    "x" + "".join(f" {c}!" for c in SPACE_OR_NOT),
    "combining alone \u0301\u0302 and after space \u0301x",
    "decomposed: cafe\u0301 A\u030angstro\u0308m n\u0303 \u1100\u1161\u11a8 \u0915\u093c e\u0301\u0301 \u212b \u2126",
    "New Yo\u0301rk Ne\u0301w York ork\u0301 o\u0301rk",
    "👨\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈 🇺🇸🇬🇧",
    "rare: \U0001f9ec \U00010348 \ue000 \U0010fffd ꙮ ᚠᛇᚻ ⵜⴰⵎⴰⵣⵉⵖⵜ",
    "newer letters: \U00031350 \U0001e030 \U00011f00 \u1e9e \U0001f6dc",
    "unassigned: \u0378 \U000e0080 \U0002fa1e",
    "private use \U000f0000\U00100000 and surrogates of astral 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "New York is in new york, NEW YORK! York ork Yorkshire",
    "[SEP2]   after sep2 [SEP2]x",
    "tokenization embeddings representations hello quick Москва 東京 2024 ... hellohello",
    " tokenization   ...    ",
    "a" * 300,
    "ab" * 150,
    " " * 50 + "x",
    "\n" * 20,
    "supercalifragilisticexpialidocious" * 5,
    "日本語" * 40,
    "😀" * 30,
    " ".join(SENTENCES),
]

TRICKY = [
    "a", "b", "e", "s", "t", "S", "T", "x", "A", "Z", "0", "7", "12", "345", " ", " ", " ", "  ", "\t", "\n", "\r",
    "\r\n", "\u00a0", "\u3000", "\u2003", "\u0085", "\u200b", "\u00ad", "\ufeff", "\u0001", "\u007f", "\u0000", "\u0301",
    "é", "ñ", "ö", "ß", "İ", "ı", "ﬁ", "Ⅻ", "①", "½", "²", "٣", "Ａ", "１", "！", "日", "本", "語", "中", "文", "\uac00", "Д",
    "ж", "Ё", "α", "Ω", "م", "ש", "क", "\u094d", "ไ", "😀", "👍", "\U0001f3fd", "\u200d", "\ufe0f", "🇫", "❤", "ʰ",
    "<s>", "</s>", "<mask>", "<pad>", "<unk>", "<", ">", "/", ".", ",", "!", "?", "-", "'", "'s", "'t", "'re", "'ll",
    "\"", "$", "%", "_", "(", ")", "{", "}", "the", "ing", "tion", "Москва", "café", "東京", "ᚠ", "ꙮ", "\U0001f9ec",
    "\ue000", "New York", "[SEP2]", "York", "ork", "hello", "...",
]


def random_texts(n, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(TRICKY) for _ in range(rng.randint(1, 24))) for _ in range(n)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--random", type=int, default=150, help="seeded random texts (more for a stress run)")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()

    base = roberta_shape(train(seed=1))
    texts = HAND_WRITTEN + random_texts(args.random, seed=args.seed)
    entries = []
    for name, override in variants(base):
        tok = Tokenizer.from_str(json.dumps(apply(base, override)))
        ids = [tok.encode(t).ids for t in texts]
        tok.enable_truncation(TRUNC_LENGTH)
        trunc = [tok.encode(t).ids for t in texts]
        entries.append({"name": name, "override": override, "ids": ids, "trunc": trunc})
        print(f"{name}: {sum(map(len, ids))} ids", file=sys.stderr)

    fixture = {
        "generator": "tests/data/gen_byte_level_bpe_cases.py",
        "versions": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__},
        "trunc_length": TRUNC_LENGTH,
        "base": base,
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
