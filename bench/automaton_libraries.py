"""Build time and memory of a JSON schema's token automaton over GPT-2's vocabulary, by library.

    pip install --no-deps xgrammar apache-tvm-ffi   # the comparison's other library
    python bench/automaton_libraries.py outlines person-city
    python bench/automaton_libraries.py xgrammar profile

outlines-core (what cdd uses) builds an `Index` whose whole transition table the pattern's
projection reads; xgrammar compiles a grammar for a matcher that hands out next-token
bitmasks. One library and schema (`bench/structured_table.py`'s SCHEMAS) a process, so the
peak-memory growth is the build's own. Prints one JSON line.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from structured_table import SCHEMAS

from cdd_cli.models.tokenizers import GPT2_FILES, Gpt2Tokenizer


def main() -> None:
    library, name = sys.argv[1], sys.argv[2]
    schema = SCHEMAS[name]
    tokenizer = Gpt2Tokenizer()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if library == "outlines":
        from outlines_core import Index, Vocabulary

        from cdd_cli.constraints.json_schema import load_schema, schema_pattern

        pattern = schema_pattern(load_schema(schema, name)[0])
        pieces: dict[bytes, list[int]] = {}
        for i, piece in enumerate(tokenizer.token_bytes()):
            if piece:
                pieces.setdefault(piece, []).append(i)
        vocabulary = Vocabulary(tokenizer.eos_id, pieces)
        started = time.perf_counter()
        Index(pattern, vocabulary)
        api = "Index.get_transitions(): every (state, token, next state)"
    elif library == "xgrammar":
        import xgrammar

        vocab = [""] * tokenizer.eos_id
        for text, i in json.loads((GPT2_FILES / "vocab.json").read_text()).items():
            if i < tokenizer.eos_id:
                vocab[i] = text
        info = xgrammar.TokenizerInfo(
            vocab, vocab_type=xgrammar.VocabType.BYTE_LEVEL, stop_token_ids=[tokenizer.eos_id]
        )
        compiler = xgrammar.GrammarCompiler(info, max_threads=1)
        started = time.perf_counter()
        compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
        api = "GrammarMatcher: next-token bitmask, accept and roll back"
    else:
        raise SystemExit(f"unknown library {library!r} (outlines or xgrammar)")
    seconds = time.perf_counter() - started
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    row = {"library": library, "schema": name, "build_s": round(seconds, 3)}
    print(json.dumps({**row, "peak_rss_mb_added": round(grown, 1), "api": api}))


if __name__ == "__main__":
    main()
