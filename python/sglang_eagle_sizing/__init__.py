"""EAGLE hidden-state sizing for SGLang 0.5.11: one source of truth, applied as a libcst rewrite."""

# First thing the command's process runs of this package: Ctrl-C during start-up (the imports
# before ``cli.main`` handles it) prints one line and exits 130. ``_signal`` is the builtin
# that ``signal`` wraps (``signal`` itself imports enum: milliseconds without a handler).
import _signal
import os
import sys

__version__ = "0.1.0"


def command_of(words: list[str]) -> str | None:
    """The command of a command line (its first word that is not an option)."""
    return next((word for word in words if not word.startswith("-")), None)


def interrupted_line(command: str | None, wrote: bool, what: str = "") -> str:
    """The one line a Ctrl-C prints. ``what``: what the transaction says the run left;
    ``wrote``: whether an ``apply`` or ``revert`` had finished writing."""
    if not what and command in ("apply", "revert"):
        what = f"{command} had finished" if wrote else "nothing written"
    return f"interrupted{': ' + what if what else ''}"


def _started_as_the_command() -> bool:
    """Whether this process runs the tool (the console script, ``python -m``), not a program
    that imports the package."""
    if sys.argv[:1] == ["-m"]:  # python -m, while Python finds the module it names
        return __name__ in sys.orig_argv
    return os.path.basename(sys.argv[0] if sys.argv else "") == "sglang-eagle-sizing"


def _interrupted(signum: int, frame: object) -> None:
    """SIGINT outside ``cli.main``'s own handling: during start-up (nothing written yet), or
    in the instant after it returned. One line, exit 130 at once."""
    # one line, however many Ctrl-C follow
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    cli = sys.modules.get(f"{__name__}.cli")
    line = interrupted_line(command_of(sys.argv[1:]), getattr(cli, "_WROTE", False))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os.write(2, f"{line}\n".encode())
    os._exit(130)


# Not over a handler of the program's own, nor over an ignored SIGINT (a background job's)
if (
    _started_as_the_command()
    and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
):
    _signal.signal(_signal.SIGINT, _interrupted)
