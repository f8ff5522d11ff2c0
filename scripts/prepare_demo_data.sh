#!/usr/bin/env bash
# Writes the training corpus of the bundled demo model (docs/DEMO.md) to the folder given as the
# argument: the King James Bible (Debian's bible-kjv-text, public domain) and the fortune cookie
# collections (Debian's fortunes and fortunes-min), cleaned to plain UTF-8.
#
#   scripts/prepare_demo_data.sh OUT_DIR
#
# OUT_DIR/train.txt and OUT_DIR/val.txt hold documents separated by a line "<|endoftext|>"
# (a Bible chapter, one verse per line without its reference; or one fortune). Every 50th
# document goes to val.txt (the held-out validation split). OUT_DIR/manifest.json records the
# package versions, the document, line and byte counts and the SHA-256 of both files.
#
# The packages are installed pinned by scripts/install-deps.sh NAME=VERSION .... bible-kjv is
# needed besides bible-kjv-text: the text package ships only /usr/lib/bible.data, a compressed
# random-access format ("EC02Compressed Data File") that its `bible` program decodes.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
OUT_DIR=$1

# name=version, Debian 12 (bookworm).
PACKAGES=(
  bible-kjv-text=4.38
  bible-kjv=4.38
  fortunes-min=1:1.99.1-7.3
  fortunes=1:1.99.1-7.3
)

"$(dirname "$0")/install-deps.sh" "${PACKAGES[@]}"

BIBLE=$(command -v bible || echo /usr/games/bible)
if [ ! -x "$BIBLE" ]; then BIBLE=/usr/bin/bible; fi
mkdir -p "$OUT_DIR"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# -f turns pretty-printing off: one verse per line, "Ge1:1 In the beginning ...".
"$BIBLE" -f gen1:1-rev22:21 >"$TMP/kjv.txt"

versions=""
for spec in "${PACKAGES[@]}"; do
  name=${spec%%=*}
  versions+="$name=$(dpkg-query -W -f='${Version}' "$name") "
done

python3 - "$TMP/kjv.txt" /usr/share/games/fortunes "$OUT_DIR" "$versions" <<'EOF'
import hashlib, json, os, re, sys, unicodedata

kjv_path, fortune_dir, out_dir, versions = sys.argv[1:5]
SEPARATOR = "<|endoftext|>"
VAL_EVERY = 50

def clean(text):
    # Overstriking ("_\bA" underlines, "A\bA" bold) keeps the last character; tabs become
    # spaces; other control characters go; trailing spaces go; NFC like the tokenizer.
    text = re.sub(r".\x08", "", text)
    text = text.expandtabs(4)
    text = "".join(c for c in text if c == "\n" or unicodedata.category(c)[0] != "C")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return unicodedata.normalize("NFC", text).strip("\n")

# Bible: a document per chapter, one verse per line, the "Book C:V " reference removed.
verse_re = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")
chapters, current, key = [], [], None
with open(kjv_path, encoding="utf-8") as f:
    for line in f:
        line = line.rstrip("\n")
        if not line.strip():
            continue
        m = verse_re.match(line)
        if not m:
            raise SystemExit(f"prepare_demo_data: unexpected line from bible: {line!r}")
        if (m.group(1), m.group(2)) != key and current:
            chapters.append("\n".join(current))
            current = []
        key = (m.group(1), m.group(2))
        current.append(m.group(4).strip())
chapters.append("\n".join(current))
if len(chapters) != 1189:
    raise SystemExit(f"prepare_demo_data: expected the 1189 chapters of the KJV, got {len(chapters)}")
verses = sum(c.count("\n") + 1 for c in chapters)
if verses != 31102:
    raise SystemExit(f"prepare_demo_data: expected the 31102 verses of the KJV, got {verses}")
chapters = [clean(c) for c in chapters]

# Fortunes: entries separated by lines holding "%"; ascii-art (pictures) left out.
skip = {"ascii-art"}
fortunes = []
files = sorted(n for n in os.listdir(fortune_dir)
               if not n.endswith((".dat", ".u8")) and n not in skip
               and os.path.isfile(os.path.join(fortune_dir, n)))
for name in files:
    raw = open(os.path.join(fortune_dir, name), "rb").read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    for entry in re.split(r"^%\s*$", text, flags=re.M):
        entry = clean(entry)
        if entry.strip() and SEPARATOR not in entry:
            fortunes.append(entry)

# Interleave deterministically so both sources spread over both splits.
documents = chapters + fortunes
train = [d for i, d in enumerate(documents) if i % VAL_EVERY != VAL_EVERY - 1]
val = [d for i, d in enumerate(documents) if i % VAL_EVERY == VAL_EVERY - 1]

manifest = {"packages": versions.split(), "separator": SEPARATOR,
            "bible_chapters": len(chapters), "bible_verses": verses,
            "fortune_files": files, "fortunes": len(fortunes),
            "validation": f"every {VAL_EVERY}th document (index % {VAL_EVERY} == {VAL_EVERY - 1})"}
for split, docs in (("train", train), ("val", val)):
    data = ("\n" + SEPARATOR + "\n").join(docs) + "\n"
    path = os.path.join(out_dir, split + ".txt")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(data)
    raw = data.encode("utf-8")
    manifest[split] = {"documents": len(docs), "bytes": len(raw),
                       "sha256": hashlib.sha256(raw).hexdigest()}
with open(os.path.join(out_dir, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=2)
    f.write("\n")
print(f"prepare_demo_data: {len(chapters)} chapters + {len(fortunes)} fortunes -> "
      f"train {manifest['train']['documents']} docs {manifest['train']['bytes']} B, "
      f"val {manifest['val']['documents']} docs {manifest['val']['bytes']} B in {out_dir}")
EOF
