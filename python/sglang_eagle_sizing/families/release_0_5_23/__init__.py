"""SGLang 0.5.23 (0.5.12-0.5.22 on structure), after upstream's refactor: every sizing site
calls upstream's helpers in ``speculative/eagle_utils.py``. What is left is fixed where
upstream decides it, in upstream's idiom: one concern a patch (``concerns.ORDER``)."""
