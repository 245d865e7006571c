"""The Davidson tweets of the training split as a `cdd train text` corpus.

    python bench/tweets_corpus.py [--davidson ../shared/data/davidson] --out DIR

Writes DIR/davidson_train.txt: every tweet (all three classes) whose text `split_of` puts in
the training split, one per paragraph (line breaks inside a tweet become spaces), in the
file's order. The toxicity bench's prompts come from the test split, so a model fine-tuned on
this corpus never saw them. Its purpose is a text model that continues toxic prompts toxically,
as MDLM trained on OpenWebText does in the paper, so that the toxicity table exercises the
projection; the shipped model, trained on literature and speeches, rarely does.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from cdd_cli.train.toxicity import read_davidson, split_of


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--davidson", type=Path, default=Path("../shared/data/davidson"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    tweets = [t.text for t in read_davidson(args.davidson) if split_of(t.text) == "train"]
    paragraphs = [re.sub(r"\s*\n\s*", " ", text) for text in tweets if text.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "davidson_train.txt"
    path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    print(f"{len(paragraphs)} tweets -> {path}")


if __name__ == "__main__":
    main()
