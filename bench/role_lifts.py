"""Role bigram lifts of English text, for the word layout (cdd_cli/constraints/lexical/grammar.py).

    python bench/role_lifts.py [--text ../shared/data/text] [--chars 400000]

Every GPT-2 token of the first `--chars` characters of each text file gets the layout role it
would have: WORD (" the"), BARE (letters without the space that are also a token with it:
"The"), PUNCT (punctuation only), OPENER (whitespace then punctuation: ' "'), BREAK (ends with
whitespace: "\\n"); other tokens (digits, "'s", word pieces after letters) break the chain.
A lift is P(role | previous role) / P(role): how much more (or less) likely a role is right
after another than anywhere. Printed as the Python dict that layout.py keeps. (The end of a
text is not lifted: see WordLayout.weight.)
"""

from __future__ import annotations

import argparse
import collections
import itertools
from pathlib import Path

from cdd_cli.constraints.lexical.grammar import BARE, BREAK, OPENER, PUNCT, WORD, token_classes
from cdd_cli.models.tokenizers import Gpt2Tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default="../shared/data/text")
    parser.add_argument("--chars", type=int, default=400_000)
    args = parser.parse_args()
    tokenizer = Gpt2Tokenizer()
    classes, _ = token_classes(tokenizer)
    files = sorted(Path(args.text).glob("*.txt"))
    text = "".join(f.read_text(errors="ignore")[: args.chars] for f in files)
    ids = tokenizer.encode(text)
    roles = []
    for token in ids:
        role = next((r for r in (WORD, BARE, PUNCT, OPENER, BREAK) if classes[r][token]), None)
        roles.append(role)
    alone = collections.Counter(r for r in roles if r)
    pairs: collections.Counter = collections.Counter()
    after: collections.Counter = collections.Counter()
    for a, b in itertools.pairwise(roles):
        if a is None or b is None:
            continue
        previous = WORD if a == BARE else a  # letters end the chunk either way
        after[previous] += 1
        pairs[previous, b] += 1
    total = sum(alone[r] for r in (WORD, BARE, PUNCT, OPENER, BREAK))
    print(f"# {len(ids)} tokens from {', '.join(f.name for f in files)}")
    lifts = {}
    for a in (WORD, PUNCT, OPENER, BREAK):
        for b in (WORD, BARE, PUNCT, OPENER, BREAK):
            # Add-one smoothing: a pair never seen is rare, not impossible.
            given = (pairs[a, b] + 1) / (after[a] + 5)
            lifts[a, b] = round(given / (alone[b] / total), 3)
    print("ROLE_LIFTS = {")
    for (a, b), value in lifts.items():
        print(f"    ({a.upper()}, {b.upper()}): {value},")
    print("}")


if __name__ == "__main__":
    main()
