"""A usable plugin whose module writes to stdout as it is imported."""

import os

from cdd_cli.plugins import ConstraintPlugin

print("loud: imported")
os.write(1, b"loud: imported, to file descriptor 1\n")


def length(texts, options):
    return [float(len(t)) for t in texts]


loud = ConstraintPlugin(name="loud", domain="molecules", judge=length)
