"""Constraint families: one module each (a differentiable surrogate plus an exact judge), each
exporting the descriptor of its types (`descriptor.py`), gathered in one table (`table.py`)."""
