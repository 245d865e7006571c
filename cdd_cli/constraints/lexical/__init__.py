"""The lexical family: words at positions, required and forbidden words, word and sentence
counts, letter counting; judged exactly and projected in closed form.

Its modules, each reading only those above it:

- `rules.py`      the word rules (plain, the CLI's; collie, COLLIE's): words, sentences, keys
- `judges.py`     the exact judges, string checks under those rules
- `grammar.py`    the roles a position may take in a layout, and which may follow which
- `programme.py`  the dynamic programme that draws a layout by its weight
- `layout.py`     the closed-form projection: a layout of the continuation's words
- `constraints.py` the constraint types, their spec checks and descriptors (the table's entry)
"""

from cdd_cli.constraints.lexical.constraints import (
    DESCRIPTORS,
    Count,
    Exclude,
    Include,
    LexicalConstraint,
    SentenceCount,
    WordAt,
    WordCount,
    check_lexical_together,
    lexical_from_spec,
)
from cdd_cli.constraints.lexical.rules import SCHEMES, Scheme, split_words, word_key

__all__ = [
    "DESCRIPTORS",
    "SCHEMES",
    "Count",
    "Exclude",
    "Include",
    "LexicalConstraint",
    "Scheme",
    "SentenceCount",
    "WordAt",
    "WordCount",
    "check_lexical_together",
    "lexical_from_spec",
    "split_words",
    "word_key",
]
