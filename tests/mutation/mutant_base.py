"""What a mutant is: one snippet of a module, replaced; the tests that should notice."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    """One mutant: replace ``original`` (exactly once in ``module``) by ``replacement``."""

    name: str
    module: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    select: tuple[str, ...] = ()
    equivalent: str = ""


def mutant(
    name: str,
    module: str,
    original: str,
    replacement: str,
    tests: tuple[str, ...],
    *select: str,
    equivalent: str = "",
) -> Mutant:
    """A ``Mutant``; ``select`` is extra pytest arguments (``"-k", "expr"``)."""
    return Mutant(name, module, original, replacement, tests, tuple(select), equivalent)
