"""How long a test waits on a subprocess before calling it hung.

A hang guard only, never a speed check (speed belongs to bench/): generous enough that a
slow or heavily loaded machine (load 40 on two cores makes a run ~20x slower than a quiet
one) never reaches it, so that only a process that will not end does.
"""

HANG_S = 1800
