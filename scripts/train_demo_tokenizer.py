#!/usr/bin/env python3
"""Trains the byte-level BPE tokenizer.json of the bundled demo model (docs/DEMO.md).

    python3 scripts/train_demo_tokenizer.py --data .demo-data --out .demo-data/tokenizer.json

Needs the Hugging Face `tokenizers` package. The pipeline is the Qwen2 one that
hybrid::Tokenizer implements (docs/TOKENIZER.md): NFC normaliser, pre-tokenizer
Sequence[Split(Qwen2 regex, Isolated), ByteLevel(use_regex=false)], BPE over GPT-2's byte
alphabet (all 256 bytes in the vocab, so no text is ever unknown), ByteLevel decoder, and one
special token <|endoftext|> (id 0) that separates documents and ends generation. Trained on
train.txt of scripts/prepare_demo_data.sh only (val.txt stays held out).
"""
import argparse
import json

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SEPARATOR = "<|endoftext|>"


def documents(path):
    with open(path, encoding="utf-8") as f:
        for doc in f.read().split("\n" + SEPARATOR + "\n"):
            yield doc.rstrip("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="folder written by scripts/prepare_demo_data.sh")
    ap.add_argument("--out", required=True, help="tokenizer.json to write")
    ap.add_argument("--vocab", type=int, default=4096, help="vocab size including the special token")
    args = ap.parse_args()

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, min_frequency=2, show_progress=False,
                                  special_tokens=[SEPARATOR],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(documents(f"{args.data}/train.txt"), trainer=trainer)
    tok.save(args.out)

    # Report the compression on the held-out split.
    val = list(documents(f"{args.data}/val.txt"))
    n_bytes = sum(len(d.encode("utf-8")) for d in val)
    n_tokens = sum(len(e.ids) for e in tok.encode_batch(val))
    spec = json.load(open(args.out))
    print(f"train_demo_tokenizer: vocab {tok.get_vocab_size()}, merges {len(spec['model']['merges'])}, "
          f"<|endoftext|> = {tok.token_to_id(SEPARATOR)}, val {n_bytes} B -> {n_tokens} tokens "
          f"({n_bytes / n_tokens:.2f} B/token) -> {args.out}")


if __name__ == "__main__":
    main()
