"""EAGLE hidden-state sizing for SGLang 0.5.11: one source of truth, applied as a libcst rewrite."""

__version__ = "0.1.0"
