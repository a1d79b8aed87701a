"""``ssm-rollback demo --grammar``: tool calls under a JSON schema, refused values rolled back.

A tiny random hybrid model decodes JSON tool calls through a grammar matcher
over a byte-level vocabulary (nothing downloaded). A run-time policy - the
part of a tool-call contract no grammar compiled ahead of time can hold -
refuses values; each refusal rolls the row (model state and matcher) back to
the boundary in front of the value and decodes it again with its first token
banned. This package holds the light parts (options, schema, policy); the
runner, which needs torch, transformers and a grammar engine, is ``_run``.
"""

from __future__ import annotations

from ._options import (
    DEFAULT_CALLS,
    DEFAULT_MAX_TOKENS,
    ENGINES,
    MAX_CALLS,
    MAX_TOKENS,
    GrammarDemoOptions,
)

__all__ = [
    "DEFAULT_CALLS",
    "DEFAULT_MAX_TOKENS",
    "ENGINES",
    "MAX_CALLS",
    "MAX_TOKENS",
    "GrammarDemoOptions",
]
