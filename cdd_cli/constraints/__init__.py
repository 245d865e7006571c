"""Constraint families: one module each (a differentiable surrogate plus an exact judge)."""
