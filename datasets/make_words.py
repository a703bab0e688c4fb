#!/usr/bin/python3
"""Writes datasets/words.txt: 4000 English words, one per line, subsampled deterministically from
Debian's wamerican word list (SCOWL, /usr/share/dict/american-english; licence in
datasets/SCOWL-LICENSE.txt).

Kept: words of 2 to 12 lowercase ASCII letters (no capitals, possessives or accents). Chosen and
ordered by the SHA-256 of the word: the 4000 words with the smallest digests, in digest order, so the
file reads in a random-looking order (a validation split taken from its end is not the end of the
alphabet) and the choice does not depend on anything but the list itself.

  /usr/bin/python3 datasets/make_words.py > datasets/words.txt
"""
import hashlib
import re
import sys

SOURCE = "/usr/share/dict/american-english"
COUNT = 4000


def main():
    with open(SOURCE, encoding="utf-8") as f:
        words = sorted({w.strip() for w in f if re.fullmatch(r"[a-z]{2,12}", w.strip())})
    chosen = sorted(words, key=lambda w: hashlib.sha256(w.encode()).digest())[:COUNT]
    sys.stdout.write("".join(w + "\n" for w in chosen))


if __name__ == "__main__":
    main()
