#!/usr/bin/env python3
"""Trains small byte-level BPE tokenizers with Hugging Face `tokenizers` and writes them, with the
ids `tokenizers` itself produces for a list of test strings, to tests/data/tokenizer/.

  python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
  /tmp/tokvenv/bin/python scripts/make_tokenizer_goldens.py

Tokenizers (configured as the real model files are; the vocabularies are tiny, trained here):
  qwen2.json          NFC | Split(Qwen2 regex, Isolated) + ByteLevel(use_regex=false) | BPE | ByteLevel
                      decoder; added <|endoftext|> <|im_start|> <|im_end|> (special) and <think>
                      </think> (not special), merges saved as [a, b] pairs (tokenizers >= 0.20);
  qwen2_legacy.json   the same model with merges as "a b" strings (older files);
  neox.json           NFC | ByteLevel(add_prefix_space=false, use_regex=true) | BPE | ByteLevel,
                      GPT-NeoX / Mamba2 style, with normalized whitespace added tokens as
                      gpt-neox-20b has, plus tokens exercising lstrip/rstrip/single_word/normalized;
  neox_prefix.json    neox.json with add_prefix_space=true;
  tekken.json         NFC | Split(Mistral-tekken regex, as Nemotron-H's tokenizer) + ByteLevel;
  llama3.json         NFC | Split(Llama-3 regex: Qwen2's with \p{N}{1,3}) + ByteLevel.
All are trained on whole lines (no split), so their merges cross the pre-tokenizer's boundaries and
a wrong split shows in the ids.
goldens.json: {versions, texts, nfc: [[s, NFC(s)]...], tokenizers: {name: {file, ids, decoded,
decoded_skip_special, pieces}}}; pieces = the pre-tokenizer's words of NFC(text). Deterministic (fixed seed).
"""
import json
import os
import random
import sys
import unicodedata

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, trainers

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tokenizer")

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
                  r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
                  r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. DON'T PANIC! I'm sure you'll see we've done it.",
    "She said: \"It's John's book, isn't it?\" They'd have known; we'd REALLY like it.",
    "café naïve coöperate résumé Ångström façade jalapeño São Paulo Zürich Øresund",
    unicodedata.normalize("NFD", "café naïve résumé Ångström façade jalapeño São Paulo Zürich"),
    "Καλημέρα κόσμε, η γλώσσα είναι ελληνική. Привет, мир! Съешь же ещё этих мягких французских булок.",
    "مرحبا بالعالم، هذه جملة عربية. שָׁלוֹם עוֹלָם, זה משפט בעברית.",
    "नमस्ते दुनिया, यह हिंदी वाक्य है। สวัสดีชาวโลก นี่คือประโยคภาษาไทย",
    "你好，世界。这是一个中文句子。日本語のテキストです。カタカナとひらがな。",
    "안녕하세요 세계, 한국어 문장입니다. " + unicodedata.normalize("NFD", "한국어 문장"),
    "👨‍👩‍👧‍👦 family 👍🏽 thumbs 🏳️‍🌈 flag 😀😃😄 emoji 🇩🇪🇯🇵",
    "digits 0123456789 ١٢٣٤٥٦٧٨٩٠ ४५६७ ๑๒๓ ①②③ Ⅻ ½ 3.14159 1,000,000",
    "def main(argv):\n    for i in range(10):\n        print(i ** 2)  # square\n\treturn 0\r\n",
    "Line one\r\nLine two\n\n\nLine five   \n  indented\t\ttabs   trailing   ",
    "$100.00 & 50% off!!! <html><body>text</body></html> https://example.com/a?b=c#d",
    "user@example.com, (parentheses) [brackets] {braces} --dashes-- ...ellipsis... ¿¡Hola!?",
    "it'ſ the ſtory IT'ſ 'ſt 12345 2024-01-31 10:45 ９８７ x  y\t\tz\r\n\r\n  \n\n",
]

TEXTS = [
    "", " ", "  ", "\n", "a", "Hello, world!", "Hello world", " Hello", "Hello ",
    "DON'T you'LL I'M we'Re they'VE he'D it'S", "'s 'S 'ſ 'T 'x '", "don't", "o'clock's",
    "cafe\u0301 café", "Ångström \u212bngstr\u00f6m", "na\u0308i\u0308ve", "\u212a \u2126",
    "a\u0323\u0302 a\u0302\u0323 \u1e9b\u0323 q\u0307\u0323", "\u1100\u1161\u11a8 \uac00\u11a8 각",
    "Καλημέρα κόσμε", "Привет, МИР!", "مرحبا بالعالم", "שָׁלוֹם עוֹלָם", "नमस्ते दुनिया",
    "สวัสดีชาวโลก", "你好，世界。", "日本語のテキスト", "안녕하세요",
    unicodedata.normalize("NFD", "안녕하세요"), "👨‍👩‍👧‍👦", "👍🏽👍", "🏳️‍🌈 🇩🇪", "😀 x😀y",
    "١٢٣ ४५६ 123 ๑๒๓ ①② Ⅻ ½", "12345678901234567890", "3.14159, 1,000,000",
    "a  b   c\t\td", "\r\n\r\ne\n\n\nf   ", "x \n y", "  \n\n  end", "tail   ", "\t\t",
    "\u00a0nbsp\u3000ideographic\u2003em", "\u200bzero\u200dwidth", "\x00\x01\x7f\x1f",
    "def f(x):\n    return x**2  # comment\n", "<html>  <b>bold</b></html>",
    "$100.00 & 50% off!!!", "https://example.com/a?b=c#d", "!!!???...", "---\n***\n",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|endoftext|>", "a<|im_end|>b", "<|im_start", "<|im_end|", "<|im_end|>>",
    "<think>\n\n</think>\n\n", "<think>x</think>", " <think> ",
    "x    y", "x        y", "    lead", "café CAFE\u0301 cafe\u0301",
    "a <mask> b", "a<mask>b", "  <mask>  ", "hello_world hello_worlds xhello_world hello_world.",
    "<|padding|>", "ǅungla ǈ Ǌ", "ſ ß ẞ", "ﬁ ﬀ", "MixedCASEWords andCamelCase HTTPServer",
    "I'm", "I'M", "i'M", "we're WE'RE", "'ll'll", "''s", "x's", "   's",
]

# Random strings from a pool that hits every branch of the regexes and of NFC.
POOL = (list("abcXYZ019 _-.,'!?\t\r\n") + ["  ", "\r\n", "'s", "'LL", "'ve", "'D", "'ſ"]
        + list("éÉñçøßŁıİ") + ["\u0301", "\u0308", "\u0323", "\u0302", "\u031b", "\u0345",
                             "\u05b8", "\u093f", "\u0e31", "\u20dd"]
        + list("αΩжЖ日本語한ㄱ") + ["\u1100", "\u1161", "\u11a8", "\uac00", "\u212b", "\u2126"]
        + list("١٣४๑½Ⅻ①") + ["\u00a0", "\u3000", "\u2003", "\u200b", "\u200d", "\u0085"]
        + ["😀", "🏽", "👍", "\ufe0f", "/", "<", ">", "|", "$"]
        + ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "<mask>", "    "])


def random_texts(rng, n, max_parts):
    return ["".join(rng.choice(POOL) for _ in range(rng.randint(1, max_parts))) for _ in range(n)]


def nfc_texts(rng, n):
    bases = list("aeiouAEOqsnc") + ["\u1e9b", "\u0391", "\u03b1", "\u0418", "\u00c5", "\u212b",
                                    "\u1100", "\u1161", "\u11a8", "\uac00", "\uac01", "\u0b47",
                                    "\u0b3e", "\u0915", "\u093c", "\u1025", "\u102e", "\u0f71"]
    marks = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0323", "\u0327",
             "\u031b", "\u0345", "\u0344", "\u0340", "\u0f72", "\u0f73", "\u0f75", "\u0f80",
             "\u05b0", "\u05bc", "\u0651", "\u064e", "\u302a", "\u3099", "\u309a"]
    out = []
    for _ in range(n):
        s = "".join(rng.choice(bases) if rng.random() < 0.45 else rng.choice(marks)
                    for _ in range(rng.randint(1, 8)))
        out.append([s, unicodedata.normalize("NFC", s)])
    return out


def train(pre_tokenizer, special, extra_added, vocab_size):
    # Trained on whole lines (no regex split), so that merges cross every place the real
    # pre-tokenizer splits: a piece boundary in the wrong place then changes the ids.
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3, trainer)
    tok.pre_tokenizer = pre_tokenizer
    tok.add_tokens(extra_added)
    return tok


def qwen2_pre():
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def main():
    rng = random.Random(1234)
    texts = TEXTS + random_texts(rng, 120, 12)
    toks = {}
    qwen = train(qwen2_pre(), ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                 [AddedToken("<think>", special=False, normalized=False),
                  AddedToken("</think>", special=False, normalized=False)], 900)
    toks["qwen2"] = json.loads(qwen.to_str())
    legacy = json.loads(qwen.to_str())
    legacy["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                 for m in legacy["model"]["merges"]]
    toks["qwen2_legacy"] = legacy

    neox = train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                 ["<|endoftext|>", "<|padding|>"],
                 [AddedToken("    ", normalized=True), AddedToken("  ", normalized=True),
                  AddedToken("<mask>", lstrip=True, rstrip=True, special=True, normalized=False),
                  AddedToken("hello_world", single_word=True, normalized=False),
                  AddedToken("café", normalized=True)], 700)
    toks["neox"] = json.loads(neox.to_str())
    prefix = json.loads(neox.to_str())
    prefix["pre_tokenizer"]["add_prefix_space"] = True
    toks["neox_prefix"] = prefix

    tekken = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(TEKKEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ["<unk>", "<s>", "</s>"], [], 700)
    toks["tekken"] = json.loads(tekken.to_str())
    llama3 = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN.replace(r"\p{N}|", r"\p{N}{1,3}|")),
                             behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ["<|begin_of_text|>", "<|eot_id|>"], [], 900)
    toks["llama3"] = json.loads(llama3.to_str())

    goldens = {"tokenizers_version": tokenizers.__version__,
               "python_unicode_version": unicodedata.unidata_version,
               "texts": texts, "nfc": nfc_texts(rng, 150), "tokenizers": {}}
    for name, spec in toks.items():
        fname = name + ".json"
        text = json.dumps(spec, ensure_ascii=False, separators=(",", ":"))
        with open(os.path.join(OUT, fname), "w", encoding="utf-8") as f:
            f.write(text)
        tok = Tokenizer.from_str(text)
        ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        goldens["tokenizers"][name] = {
            "file": fname, "ids": ids,
            "decoded": [tok.decode(i, skip_special_tokens=False) for i in ids],
            "decoded_skip_special": [tok.decode(i, skip_special_tokens=True) for i in ids],
            "pieces": [[w for w, _ in tok.pre_tokenizer.pre_tokenize_str(
                unicodedata.normalize("NFC", t))] for t in texts]}
    with open(os.path.join(OUT, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump(goldens, f, ensure_ascii=False, separators=(",", ":"))
    print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
