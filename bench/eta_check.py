"""Issue 50: is the progress line's time left within a factor of 2 of the truth on a busy
machine? Runs `cdd ARGS` with stderr a pipe (plain lines every 10 s), a CPU hog beside it for
the whole run (--no-hog: none of its own, e.g. where hogs run already), stamps each stderr line
as it arrives, and compares each line's "about M:SS left" after the sampler's first pass with
the time the run really still took (the closing line's arrival minus the line's). The child
also writes each reporter event with its time (`TRACE.events.jsonl`), so that `--replay
TRACE.events.jsonl` can rerun the estimator of this checkout (`cli/pace.py`) on a measured
run's timeline, every second of it from the second pass on, as a line then would say it (the
last 10 s left out: no ratio holds there), and `--passes` prints each pass's size and times.
A line holds where its figure is within 2x of the truth, or its range (two times joined by
an en dash) has the truth inside and its most at most 4 times its least (`holds`). Before the
first pass is done a line says only what the run needs at least ("at least M:SS left"):
each such bound is checked against the truth (it holds where it is not above it).

    .venv/bin/python bench/eta_check.py --trace /tmp/eta1 -- molecules -n 256 -c sa \
        --tau 3.5 -o /tmp/eta_run.jsonl
    .venv/bin/python bench/eta_check.py --replay /tmp/eta1.events.jsonl
    .venv/bin/python bench/eta_check.py --replay OLDER.events.jsonl --cap 16  # (see --cap)
    .venv/bin/python bench/eta_check.py --replay RUN.events.jsonl --draws beta  # bench/eta_draws.py
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import eta_draws

LEFT = re.compile(r"about (\d+):(\d\d):(\d\d) left")
RANGE = re.compile(r"about (\d+):(\d\d):(\d\d)–(\d+):(\d\d):(\d\d) left")
LEAST = re.compile(r"at least (\d+):(\d\d):(\d\d) left")
DONE = re.compile(r"^\w+ (\d+)/(\d+)")


def child(trace: str, argv: list[str]) -> None:
    """Run the command with the reporter's events recorded (time.monotonic, as its clock)."""
    import cdd_cli.__main__  # first: the command's environment before torch loads
    from cdd_cli.cli import progress

    cls = progress.RichReporter
    sink = open(trace + ".events.jsonl", "w")  # noqa: SIM115 (the command ends in os._exit)

    def wrap(name, pick):
        original = getattr(cls, name)

        def wrapped(self, *args):
            sink.write(json.dumps([time.monotonic(), name, *pick(*args)]) + "\n")
            sink.flush()
            return original(self, *args)

        setattr(cls, name, wrapped)

    wrap("run_started", lambda label, total, batch_size: [total, batch_size])
    wrap("draws_allowed", lambda cap: [cap])
    wrap("resumed", lambda present, draws: [present, draws])
    wrap("pass_started", lambda *a: list(a))
    wrap("step", lambda info: [info.index, info.steps])
    wrap("records_done", lambda done, info: [done])
    wrap("stage", lambda p: [p.stage, p.step, p.steps, p.samples, p.settled, p.touched, p.ended])
    wrap("alm", lambda p: [p.outer, p.inner, p.violating, p.samples, p.max_outer])
    planned = cls.projection_planned

    def told(self, plan, round_seconds):
        sink.write(json.dumps([time.monotonic(), "projection_planned", plan.surrogates_from,
                               plan.max_outer, plan.inner_iters, plan.project_from]) + "\n")

        def measured():  # the round measured before the first pass, if the reporter asks
            seconds = round_seconds()
            sink.write(json.dumps([time.monotonic(), "round_measured", seconds]) + "\n")
            return seconds

        return planned(self, plan, measured)

    cls.projection_planned = told
    sys.argv = ["cdd", *argv]
    cdd_cli.__main__.main()


def seconds(match: re.Match, first: int = 0) -> int:
    h, m, s = (int(g) for g in match.groups()[first : first + 3])
    return h * 3600 + m * 60 + s


def holds(said: float | tuple[float, float], true: float) -> bool:
    """A figure within a factor of 2 of the truth; a range with the truth inside it and its
    most at most 4 times its least (so that its geometric middle is within 2x as well: a
    range no narrower would hold wherever a figure within 2x does, and one wider says less
    than such a figure)."""
    if isinstance(said, tuple):
        return said[0] <= true <= said[1] and said[1] <= 4 * said[0]
    return true > 0 and 0.5 <= said / true <= 2.0


def table(stamped: list[tuple[float, str]], end: float) -> tuple[int, int]:
    """Print said against true for each line after the first pass, and each bound before;
    (within 2x, lines)."""
    within = lines = held = bounds = 0
    first_pass_done = False
    for at, line in stamped:
        done = DONE.match(line)
        if not done or "elapsed" not in line:
            continue
        number = re.search(r"pass (\d+), ", line)
        first_pass_done = first_pass_done or (number is not None and int(number.group(1)) > 1)
        if not first_pass_done:
            least = LEAST.search(line)
            if least is not None:
                bounds += 1
                held += seconds(least) <= end - at
                verdict = "held" if seconds(least) <= end - at else "ABOVE"
                print(f"{at - stamped[0][0]:7.1f}  at least {seconds(least):>5}  "
                      f"true {end - at:6.1f}  {verdict}")  # fmt: skip
            continue
        true = end - at
        ranged, said = RANGE.search(line), LEFT.search(line)
        lines += 1
        if ranged is not None:
            low, high = seconds(ranged), seconds(ranged, 3)
            ok = holds((low, high), true)
            within += ok
            verdict, text = "held" if ok else "MISS", f"{low}-{high}"
        elif said is None:
            verdict, text = "blank", "-"
        else:
            ratio = seconds(said) / true if true > 0 else float("inf")
            ok = holds(seconds(said), true)
            within += ok
            verdict, text = f"{ratio:.2f}x {'ok' if ok else 'MISS'}", str(seconds(said))
        where = re.search(r"pass \d+, [^;]*?(?=, its steps|;|$)", line)
        print(f"{at - stamped[0][0]:7.1f}  said {text:>9}  true {true:6.1f}  {verdict:10}  "
              f"{where.group(0) if where else ''}")  # fmt: skip
    print(f"held (a figure within 2x, a range around the truth): {within} of {lines} lines "
          f"after the first pass; "
          f"bounds before it held: {held} of {bounds}")  # fmt: skip
    return within, lines


def parent(trace: str, argv: list[str], hog: bool) -> None:
    hogs = []
    if hog:
        hogs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
    try:
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", trace, "--", *argv],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, bufsize=1,
        )  # fmt: skip
        stamped = []
        assert proc.stderr is not None
        for line in proc.stderr:
            stamped.append((time.monotonic(), line.rstrip("\n")))
        code = proc.wait()
        end = time.monotonic()
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    closing = [at for at, line in stamped if re.match(r"^\w+ (\d+)/\1 in ", line)]
    end = closing[-1] if closing else end
    Path(trace + ".log").write_text("".join(f"{at - start:8.2f} {line}\n" for at, line in stamped))
    print(f"exit {code}, {end - start:.1f} s, load {os.getloadavg()}")
    table(stamped, end)


def replay(
    path: str,
    every: float = 1.0,
    pace_class=None,
    show: float = 0,
    cap: int | None = None,
    why: bool = False,
    untold: bool = False,
) -> tuple[int, int]:
    """Rerun this checkout's Pace on a recorded timeline; query it every `every` seconds
    after the first pass (what a line then says), against the true time left. `cap`: the
    draws a sample may take, for a trace recorded before runs told it (`draws_allowed`).
    `why`: each line off by over 2x, its estimate and the truth split into the pass at hand
    and the passes after it (which of them the estimate missed). `untold`: as if the run had
    not told its projection plan (`projection_planned`) nor measured an ALM round."""
    from cdd_cli.cli.pace import Pace
    from cdd_cli.cli.pass_costs import LateALM

    pace_class = pace_class or Pace
    events = [json.loads(line) for line in Path(path).read_text().splitlines()]
    if untold:
        events = [e for e in events if e[1] not in ("projection_planned", "round_measured")]
    start, end = events[0][0], events[-1][0]
    # When each pass ended: the next one's start, the last one's the run's end.
    ends = [*[at for at, name, *_ in events if name == "pass_started"][1:], end]
    pace = None
    within = lines = blank = held = bounds = ranges = held_lines = 0
    worst = (1.0, 0.0, 0.0)
    t = start
    i = 0
    while t <= end:
        while i < len(events) and events[i][0] <= t:
            at, name, *args = events[i]
            if name == "run_started":
                pace = pace_class(args[0], args[1], at)
                pace.cap = cap
            elif name == "draws_allowed":
                pace.cap = cap = args[0]
            elif name == "projection_planned":
                pace.late = LateALM(args[0], args[1])
            elif name == "round_measured":
                pace.late.told = args[0]
            elif name == "resumed":
                told = pace
                pace = pace_class(pace.total, pace.batch_size, at, *args)
                pace.cap, pace.late = cap, told.late
            elif name == "pass_started":
                pace.begin_pass(*args, at)
            elif name == "step":
                pace.stepped(*args, at)
            elif name == "records_done":
                pace.finished(args[0])
            elif name == "alm":
                pace.alm_round(args[0], args[4], at, args[3])
            i += 1
        least = pace.least(t) if pace is not None else None
        if least is not None and end - t >= 10:  # before the first pass is done: a bound
            bounds += 1
            held += least <= end - t
        if pace is not None and pace.passes_done and pace.done < pace.total:
            left, shown = pace.left(t), pace.shown(t)
            lines += end - t >= 10
            if show and round((t - start) / every) % round(show / every) == 0:
                ranged = isinstance(shown, tuple)
                text = f"{shown[0]:.1f}-{shown[1]:.1f}" if ranged else f"{left:.1f}"
                where = f"pass {pace.passes} ({pace.samples}) step {pace.step}"
                print(f"{t - start:6.0f} said {text:>13} true {end - t:6.1f}  {where}")
            if end - t < 10:  # the last line's 10 s: no ratio holds as the truth nears 0
                pass
            elif left < 1:
                blank += 1
            else:
                ratio = left / (end - t)
                within += 0.5 <= ratio <= 2.0
                if why and not 0.5 <= ratio <= 2.0:
                    here = pace.here(t, pace.speed(), pace.fixed_share())
                    true_here = ends[pace.passes - 1] - t
                    print(f"{t - start:6.0f} said {left:6.1f} true {end - t:6.1f} "
                          f"({ratio:.2f}x): pass {pace.passes} said {here:6.1f} true "
                          f"{true_here:6.1f}; the passes after it said {left - here:6.1f} "
                          f"true {end - t - true_here:6.1f}")  # fmt: skip
                held_lines += holds(shown, end - t)
                ranges += isinstance(shown, tuple)
                if abs(math.log(ratio)) > abs(math.log(worst[0])):
                    worst = (ratio, t - start, end - t)
        t += every
    print(f"{path}: {held_lines} of {lines} lines (10 s or more left) held as shown "
          f"({ranges} of them ranges: `holds`); the estimate {within} within 2x, {blank} "
          f"blank, worst {worst[0]:.2f}x at {worst[1]:.0f} s ({worst[2]:.0f} s left); "
          f"before the first pass was done, {held} of {bounds} bounds held")  # fmt: skip
    return held_lines, lines


def pace_of(steps: list[tuple[float, int]]) -> str:
    """Seconds per ALM round of the steps (seconds, rounds) that ran rounds ("-": none)."""
    spent = sum(seconds for seconds, rounds in steps if rounds)
    counted = sum(rounds for _, rounds in steps)
    return f"{spent / counted:.3f}" if counted else "-"


def passes(path: str) -> None:
    """Print each pass of a recorded run: when it began, its samples (redrawn ones), the
    median and the sum of its regular steps, its last step, what came after it until the
    next pass (judging, records), and the projection's ALM rounds in it (outer iterations),
    seconds per round (the steps that ran rounds over their rounds: the machine's speed at
    the ALM's work, apart from how much of it the samples needed; the pass's, then its first
    and second half's steps') and how many times an ALM ran to its cap of rounds."""
    events = [json.loads(line) for line in Path(path).read_text().splitlines()]
    start = events[0][0]
    table = []  # per pass: began, samples, redraws, each step's end, each step's rounds
    capped = []  # per pass: its steps whose ALM ran to its cap
    for at, name, *args in events:
        if name == "pass_started":
            table.append((at, args[0], args[1], [at], [0]))
            capped.append(0)
        elif name == "step" and table:
            table[-1][3].append(at)
            table[-1][4].append(0)
        elif name == "alm" and table:
            table[-1][4][-1] += 1  # a round of the step under way
            capped[-1] += args[0] == args[4]  # (outer, inner, violating, samples, max_outer)
    ends = [began for began, *_ in table[1:]] + [events[-1][0]]
    print("  began  samples redrawn  step(median)  steps  last step  after  rounds  "
          "s/round (its halves)  capped")  # fmt: skip
    rows = zip(table, ends, capped, strict=True)
    for (began, samples, redraws, stamps, rounds), end, at_cap in rows:
        durations = [b - a for a, b in itertools.pairwise(stamps)]
        regular = durations[:-1]
        middle = sorted(regular)[len(regular) // 2] if regular else 0.0
        final = durations[-1] if durations else 0.0
        steps = list(zip(durations, rounds, strict=False))
        half = len(steps) // 2
        per_round = " / ".join(pace_of(part) for part in (steps, steps[:half], steps[half:]))
        print(f"{began - start:7.1f}  {samples:7d} {redraws:7d}  {middle:12.3f}  "
              f"{sum(regular):5.1f}  {final:9.2f}  {end - stamps[-1]:5.2f}  "
              f"{sum(rounds):6d}  {per_round:>20}  {at_cap:6d}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child")
    parser.add_argument("--trace", default="/tmp/eta_check")
    parser.add_argument("--no-hog", action="store_true")
    parser.add_argument("--replay", nargs="*")
    parser.add_argument("--show", type=float, default=0, help="with --replay: every so many s")
    parser.add_argument("--why", action="store_true", help="with --replay: each line off "
                        "by over 2x, split into the pass at hand and those after it")  # fmt: skip
    parser.add_argument("--cap", type=int, help="with --replay: the draws a sample may take, "
                        "for traces recorded before runs told it")  # fmt: skip
    parser.add_argument("--untold", action="store_true", help="with --replay: as if the run "
                        "had not told its projection plan")  # fmt: skip
    parser.add_argument("--passes", help="a trace's events: print each pass's size and times")
    parser.add_argument("--draws", choices=["beta", "hard", "told"], help="with --replay: the "
                        "passes to come from a fitted law of each sample's p (bench/eta_draws.py)"
                        ", or told by the trace itself")  # fmt: skip
    parser.add_argument("--margin", type=float, default=2.0, help="with --draws beta|hard: "
                        "the log-likelihood a law must gain over one p")  # fmt: skip
    parser.add_argument("--limit", action="store_true", help="with --replay: the best any "
                        "figure does for the tail's passes left (bench/eta_draws.py)")  # fmt: skip
    parser.add_argument("argv", nargs="*")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.argv)
    elif args.passes:
        passes(args.passes)
    elif args.replay and args.limit:
        for path in args.replay:
            eta_draws.limit(path, args.cap or 16)
    elif args.replay:
        for path in args.replay:
            pace_class = None
            if args.draws == "told":
                pace_class = eta_draws.told_pace(path)
            elif args.draws:
                pace_class = eta_draws.drawn_pace(args.draws, args.margin)
            replay(path, pace_class=pace_class, show=args.show, cap=args.cap, why=args.why,
                   untold=args.untold)  # fmt: skip
    else:
        parent(args.trace, args.argv, not args.no_hog)


if __name__ == "__main__":
    main()
