"""A byte-level vocabulary built on the spot, and grammar matchers for it: nothing to download.

Ids 0-255 are the 256 bytes, then the special tokens (EOS first). xgrammar
gets it as a raw ``TokenizerInfo`` vocabulary, llguidance as an
``LLTokenizer`` over a ``TokenizerWrapper``; both see EOS as the stop token
and never as text. A model whose vocabulary is at least ``vocab_size`` wide
(the tiny test models are built with it) decodes under either matcher.

``json_schema_matchers`` compiles one JSON schema for both engines in the
same compact form - no whitespace, separators ``","`` and ``":"`` - and
follows the schema as written (properties it does not forbid with
``"additionalProperties": false`` are allowed), because the engines'
defaults differ: xgrammar's puts spaces after the separators or allows any
whitespace, and its strict mode forbids extra properties.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

import attrs

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError, shown
from .matchers import LLGuidanceMatcher, XGrammarMatcher

if TYPE_CHECKING:
    import llguidance
    import xgrammar

__all__ = ["BYTE_TOKENS", "ByteTokenizer", "JsonSchema", "json_schema_matchers"]

#: Ids 0-255 are the bytes themselves.
BYTE_TOKENS: Final = 256

#: A JSON schema: its text, or the parsed object.
JsonSchema = str | Mapping[str, object]


def _check_specials(
    _instance: object, _attribute: attrs.Attribute[tuple[str, ...]], value: object
) -> None:
    if (
        not isinstance(value, tuple)
        or not value
        or not all(isinstance(name, str) and name for name in value)
        or len(set(value)) != len(value)
    ):
        raise InvalidArgumentError(
            f"'specials' must be a non-empty tuple of distinct non-empty strings (EOS first), "
            f"got {shown(value)}"
        )


@attrs.frozen
class ByteTokenizer:
    """A byte-level vocabulary: ids 0-255 are bytes, then ``specials`` (the first is EOS)."""

    specials: tuple[str, ...] = attrs.field(default=("<|eos|>",), validator=_check_specials)

    @property
    def vocab_size(self) -> int:
        """256 bytes plus the special tokens."""
        return BYTE_TOKENS + len(self.specials)

    @property
    def eos_token_id(self) -> int:
        """The first special token: 256."""
        return BYTE_TOKENS

    def vocab(self) -> list[bytes]:
        """Every token's bytes, by id (a special token's are its name)."""
        return [bytes([i]) for i in range(BYTE_TOKENS)] + [s.encode() for s in self.specials]

    def encode(self, text: str | bytes) -> list[int]:
        """The token ids of ``text``'s UTF-8 bytes (no special tokens)."""
        if isinstance(text, str):
            text = text.encode()
        if not isinstance(text, bytes):
            raise InvalidArgumentTypeError(
                f"'text' must be str or bytes, got {type(text).__name__}"
            )
        return list(text)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``: bytes as UTF-8 (invalid ones replaced), specials by name."""
        if isinstance(ids, str) or not isinstance(ids, Iterable):
            raise InvalidArgumentTypeError(
                f"'ids' must be a sequence of token ids, got {type(ids).__name__}"
            )
        out, pending = [], bytearray()
        for position, token in enumerate(ids):
            if type(token) is not int or not 0 <= token < self.vocab_size:
                raise InvalidArgumentError(
                    f"'ids[{position}]' must be a token id in [0, {self.vocab_size}), "
                    f"got {shown(token)}"
                )
            if token < BYTE_TOKENS:
                pending.append(token)
                continue
            out.append(pending.decode(errors="replace"))
            pending.clear()
            out.append(self.specials[token - BYTE_TOKENS])
        out.append(pending.decode(errors="replace"))
        return "".join(out)

    def xgrammar_tokenizer_info(self) -> xgrammar.TokenizerInfo:
        """The vocabulary as xgrammar's ``TokenizerInfo`` (raw bytes, EOS the stop token).

        The specials after EOS have no bytes there, so xgrammar never takes them as text.
        """
        return _xgrammar_info(self.specials)

    def llguidance_tokenizer(self) -> llguidance.LLTokenizer:
        """The vocabulary as llguidance's ``LLTokenizer`` (specials marked special)."""
        return _llguidance_tokenizer(self.specials)

    def xgrammar_json_matcher(
        self, schema: JsonSchema, *, max_rollback_tokens: int | None = None
    ) -> XGrammarMatcher:
        """A fresh xgrammar matcher of compact JSON that ``schema`` allows."""
        import xgrammar

        compiler = _xgrammar_compiler(self.specials)
        try:
            compiled = compiler.compile_json_schema(
                _schema_text(schema),
                any_whitespace=False,
                separators=(",", ":"),
                strict_mode=False,  # as written, like llguidance: extras unless forbidden
            )
        except RuntimeError as error:
            raise InvalidArgumentError(
                f"'schema' must be a JSON schema xgrammar compiles, got {shown(schema)}: {error}"
            ) from None
        matcher = xgrammar.GrammarMatcher(compiled)
        return XGrammarMatcher(matcher, self.vocab_size, max_rollback_tokens=max_rollback_tokens)

    def llguidance_json_matcher(
        self, schema: JsonSchema, *, max_rollback_tokens: int | None = None
    ) -> LLGuidanceMatcher:
        """A fresh llguidance matcher of compact JSON that ``schema`` allows."""
        import llguidance

        text = _schema_text(schema)
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                text, overrides={"whitespace_flexible": False}
            )
        except ValueError as refused:  # the overrides need an object schema: 'false' has none
            raise InvalidArgumentError(
                f"'schema' must be a JSON schema llguidance compiles, got {shown(schema)}: "
                f"{refused}"
            ) from None
        tokenizer = _llguidance_tokenizer(self.specials)
        error = llguidance.LLMatcher.validate_grammar(grammar, tokenizer)
        if error:
            raise InvalidArgumentError(
                f"'schema' must be a JSON schema llguidance compiles, got {shown(schema)}: {error}"
            )
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        return LLGuidanceMatcher(matcher, tokenizer, max_rollback_tokens=max_rollback_tokens)


def json_schema_matchers(
    schema: JsonSchema,
    *,
    tokenizer: ByteTokenizer | None = None,
    max_rollback_tokens: int | None = None,
) -> tuple[XGrammarMatcher, LLGuidanceMatcher]:
    """Fresh xgrammar and llguidance matchers of compact JSON for ``schema`` on a byte vocabulary.

    ``tokenizer`` defaults to ``ByteTokenizer()`` (257 ids, EOS 256).
    """
    if tokenizer is None:
        tokenizer = ByteTokenizer()
    elif not isinstance(tokenizer, ByteTokenizer):
        raise InvalidArgumentTypeError(
            f"'tokenizer' must be a ByteTokenizer, got {type(tokenizer).__name__}"
        )
    return (
        tokenizer.xgrammar_json_matcher(schema, max_rollback_tokens=max_rollback_tokens),
        tokenizer.llguidance_json_matcher(schema, max_rollback_tokens=max_rollback_tokens),
    )


def _schema_text(schema: object) -> str:
    if isinstance(schema, str):
        text = schema
    elif isinstance(schema, Mapping):
        try:
            text = json.dumps(schema)
        except (TypeError, ValueError) as error:
            raise InvalidArgumentError(
                f"'schema' must be JSON-serialisable, got {shown(schema)}: {error}"
            ) from None
    else:
        raise InvalidArgumentTypeError(
            f"'schema' must be a JSON schema as str or mapping, got {type(schema).__name__}"
        )
    try:
        parsed = json.loads(text)
    except ValueError as error:
        raise InvalidArgumentError(
            f"'schema' must be valid JSON, got {shown(text)}: {error}"
        ) from None
    if not isinstance(parsed, dict | bool):
        raise InvalidArgumentError(f"'schema' must be a JSON object, got {shown(text)}")
    # 'true' allows anything, as '{}' does; llguidance takes only the object form.
    return "{}" if parsed is True else text


# Building a compiler or a tokenizer costs milliseconds; one per vocabulary is enough.
@functools.cache
def _xgrammar_info(specials: tuple[str, ...]) -> xgrammar.TokenizerInfo:
    import xgrammar

    # xgrammar reads a special token's name as text, which a grammar may allow inside
    # a string; a token with no bytes it takes for special. EOS stays named: a stop token.
    vocab = [*ByteTokenizer(specials).vocab()[: BYTE_TOKENS + 1], *([b""] * (len(specials) - 1))]
    return xgrammar.TokenizerInfo(
        vocab, xgrammar.VocabType.RAW, vocab_size=len(vocab), stop_token_ids=[BYTE_TOKENS]
    )


@functools.cache
def _xgrammar_compiler(specials: tuple[str, ...]) -> xgrammar.GrammarCompiler:
    import xgrammar

    return xgrammar.GrammarCompiler(_xgrammar_info(specials), max_threads=1)


@functools.cache
def _llguidance_tokenizer(specials: tuple[str, ...]) -> llguidance.LLTokenizer:
    import llguidance

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_WrappedBytes(specials)))


class _WrappedBytes:
    """What ``llguidance.TokenizerWrapper`` reads from a tokenizer, for the byte vocabulary."""

    def __init__(self, specials: tuple[str, ...]) -> None:
        self.eos_token_id = BYTE_TOKENS
        self.bos_token_id = None
        self.tokens = ByteTokenizer(specials).vocab()
        self.special_token_ids = list(range(BYTE_TOKENS, BYTE_TOKENS + len(specials)))

    def __call__(self, text: str | bytes) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)
