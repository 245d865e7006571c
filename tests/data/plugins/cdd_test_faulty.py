"""Constraint plugins that go wrong in each way cdd must report in one line."""

import os
import sys
import time

import torch

from cdd_cli.plugins import ConstraintPlugin


def length(texts, options):
    return [float(len(t)) for t in texts]


def plugin(name, judge=length, **kw):
    return ConstraintPlugin(name=name, domain="molecules", judge=judge, **kw)


def raising(texts, options):
    raise RuntimeError("the scoring service is down")


def nan(texts, options):
    return [float("nan") for _ in texts]


def miscount(texts, options):
    return [1.0]


CALLS = {"n": 0}


def later(texts, options):
    CALLS["n"] += 1
    if CALLS["n"] > 1:
        raise ValueError("gave up on the second call")
    return length(texts, options)


def sleepy(texts, options):
    time.sleep(0.07 * len(texts))
    return length(texts, options)


def wrong_shape(options, vocabulary):
    return lambda soft: torch.zeros(3, 3)


not_a_plugin = {"name": "not_a_plugin"}
judge_raises = plugin("judge_raises", raising)
shadows_sa = plugin("sa")
judge_nan = plugin("judge_nan", nan)
judge_miscounts = plugin("judge_miscounts", miscount)
fails_later = plugin("fails_later", later)
slow = plugin("slow", sleepy)
bad_surrogate = plugin("bad_surrogate", surrogate=wrong_shape)


def chatty(texts, options):
    print("scoring", len(texts), "texts")
    return length(texts, options)


def numpy_scores(texts, options):
    import numpy

    return numpy.array([len(t) for t in texts], dtype=numpy.int64)


printing = plugin("printing", chatty)
numpy_judge = plugin("numpy_judge", numpy_scores)


def exits(texts, options):
    sys.exit(0)


def interrupts(texts, options):
    raise KeyboardInterrupt


def exits_checking(options):
    sys.exit(3)


def exiting_surrogate(options, vocabulary):
    return lambda soft: sys.exit(1)


def writes_to_fd_1(texts, options):
    """Around the records' stream: a write to file descriptor 1, and a shell's."""
    os.write(1, b"not a record\n")
    os.system("echo from a shell")
    return length(texts, options)


judge_exits = plugin("judge_exits", exits)
judge_interrupts = plugin("judge_interrupts", interrupts)
check_exits = plugin("check_exits", check=exits_checking)
surrogate_exits = plugin("surrogate_exits", surrogate=exiting_surrogate)
fd_writer = plugin("fd_writer", writes_to_fd_1)
