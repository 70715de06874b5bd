"""Exit codes and input errors shared by the CLI commands (``simulate``, ``explain``, ``disrupt``, ``convert``,
``playground interrupt``).

Exit codes: 0 success; 1 a step failed for a reason outside the user's input (AWS unreachable, no
credentials, a playground that does not answer); 2 bad input the user can fix (manifests, arguments,
price table, EC2NodeClass). A command raises :class:`BadInput` or :class:`StepFailed` with a message
naming what is wrong and where, and turns it into its exit code with :func:`report`, which prints
``error: <message>`` on stderr.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from pathlib import Path

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_OK",
    "BadInput",
    "StepFailed",
    "check_choice",
    "check_manifests",
    "report",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


class BadInput(ValueError):
    """Input the user can fix (manifests, arguments, price table, EC2NodeClass): exit 2."""

    exit_code = EXIT_BAD_INPUT


class StepFailed(RuntimeError):
    """A step failed for a reason outside the user's input (AWS, credentials, network): exit 1."""

    exit_code = EXIT_FAILED


def report(error: BadInput | StepFailed) -> int:
    """Print ``error: <message>`` on stderr and return the error's exit code (2 or 1)."""
    print(f"error: {error}", file=sys.stderr)
    return error.exit_code


def check_choice(option: str, value: str, choices: Iterable[str]) -> None:
    """BadInput naming ``option`` (``--output``) and the accepted values when ``value`` is not one of them."""
    allowed = tuple(choices)
    if value not in allowed:
        raise BadInput(f"{option} must be one of {', '.join(allowed)}, not {value!r}")


def check_manifests(files: Sequence[Path], *, price_table: Path | None = None) -> None:
    """BadInput when no manifest file is given, one does not exist, or ``price_table`` does not exist."""
    if not files:
        raise BadInput("no manifest file given (use -f FILE, repeatable)")
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise BadInput(f"manifest file not found: {', '.join(missing)}")
    if price_table is not None and not price_table.is_file():
        raise BadInput(f"price table not found: {price_table}")
