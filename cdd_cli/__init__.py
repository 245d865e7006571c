"""cdd: constrained discrete diffusion for text and molecules."""

__version__ = "0.1.0"
