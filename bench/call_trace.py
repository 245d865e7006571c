"""How often control comes back to each cdd module during one command: a measure of hubs.

    python bench/call_trace.py molecules -n 8 -c sa --tau 3.5
    python bench/call_trace.py --tree /path/to/other/checkout molecules -n 8 -c sa --tau 3.5

Runs the command in this process under `sys.setprofile` and counts, per cdd_cli module, the
Python-level events (a call into it, or a return into it) that move control into that module
from another one; torch, RDKit and the standard library in between are skipped, so a cdd
module calling a library that calls back into the same module counts nothing. Prints the
modules with the most entries (JSON). Only control transfers between cdd modules count: a
module that works alone (a search loop, a model's forward pass) scores low however long it runs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--top", type=int, default=8)
    args, command = parser.parse_known_args()
    tree = Path(args.tree).resolve()
    sys.path.insert(0, str(tree))
    package = str(tree / "cdd_cli") + os.sep
    entries: collections.Counter[str] = collections.Counter()
    current = [None]

    def module_of(frame) -> str | None:
        filename = frame.f_code.co_filename
        if not filename.startswith(package):
            return None
        return filename[len(package) :].removesuffix(".py").replace(os.sep, ".")

    def profile(frame, event, arg) -> None:
        if event == "call":
            here = module_of(frame)
        elif event == "return":
            back = frame.f_back
            here = module_of(back) if back is not None else None
        else:
            return
        if here is not None and here != current[0]:
            entries[here] += 1
            current[0] = here

    from cdd_cli.cli.app import app  # the tree's own package (sys.path above)

    sys.setprofile(profile)
    try:
        app([*command, "-q", "-o", os.devnull], standalone_mode=False)
    finally:
        sys.setprofile(None)
    print(json.dumps({"command": command, "entries": dict(entries.most_common(args.top))}))


if __name__ == "__main__":
    main()
