"""Grammar-constrained decoding that rolls back: the model state and the matcher move together.

Structured generation keeps state of its own - a grammar matcher that has
accepted every token of the sequence. When a hybrid model rolls a sequence
back to a boundary, the matcher must give back the same tokens, or the next
token mask describes text that is no longer there. Here:

- ``GrammarMatcher``: the small protocol a rollback needs from a matcher
  (``accept_token``, ``rollback``, ``fill_next_token_bitmask``, and
  ``rollback_limit`` to ask before anything moves);
- ``XGrammarMatcher`` and ``LLGuidanceMatcher``: adapters for
  ``xgrammar.GrammarMatcher`` and ``llguidance.LLMatcher``;
- ``allocate_token_bitmask`` and ``apply_token_bitmask``: the int32 token
  bitmask both engines fill, and masking logits with it (torch);
- ``rollback_with_grammar``: the rollback transaction - plan the model's
  rollback, ask the matcher, then move both or neither (``MatcherDeclined``
  when the matcher cannot go back that far);
- ``ByteTokenizer`` and ``json_schema_matchers``: a byte-level vocabulary
  built locally, and matchers of a JSON schema for it in both engines.

Needs ``torch`` and, for the adapters, ``xgrammar`` or ``llguidance`` (the
``grammar`` extra).
"""

from __future__ import annotations

from ._grammar.bitmask import allocate_token_bitmask, apply_token_bitmask
from ._grammar.byte_tokenizer import ByteTokenizer, json_schema_matchers
from ._grammar.matchers import GrammarMatcher, LLGuidanceMatcher, XGrammarMatcher
from ._grammar.rollback import CropPlanner, MatcherDeclined, rollback_with_grammar

__all__ = [
    "ByteTokenizer",
    "CropPlanner",
    "GrammarMatcher",
    "LLGuidanceMatcher",
    "MatcherDeclined",
    "XGrammarMatcher",
    "allocate_token_bitmask",
    "apply_token_bitmask",
    "json_schema_matchers",
    "rollback_with_grammar",
]
