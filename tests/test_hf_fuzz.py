"""Fuzzed keyword arguments of the Hugging Face decoders: greedy ``generate``'s output, or named.

Each example is either a call whose every keyword is valid, which must give
plain greedy ``model.generate``'s tokens (or, sampled or with a ``reject``
that refuses, a well-formed result), or a call with one bad keyword, which
must raise an ``SsmRollbackError`` naming it. A "maybe" keyword is a
function whose answers are wrong (a draft of floats, a predicate that
returns a string): the call raises naming it if the decoder calls it, and
decodes as valid if not. Work is bounded (at most four new tokens, small
rollback budgets for a ``reject`` that loops), so no example can hang.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Literal

import attrs
import pytest

pytest.importorskip("transformers")

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache
from transformers.utils import logging as hf_logging

from ssm_rollback import SsmRollbackError
from ssm_rollback.integrations.transformers import (
    GenerationResult,
    backtracking_generate,
    speculative_generate,
)
from ssm_rollback.testing import tiny_model

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
pytestmark = pytest.mark.usefixtures("quiet_warnings")

V = 128
MAX_NEW = 3
PROMPT = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 9]])
#: About 100 examples in all under the ``ci`` profile (two tests), scaled with the profile.
EXAMPLES = max(1, settings().max_examples // 6)

Verdict = Literal["ok", "bad", "maybe"]


@attrs.frozen
class Arg:
    """A keyword's value and what it must do: decode (``ok``), raise, or either (``maybe``)."""

    value: object
    verdict: Verdict = "ok"
    #: An ``ok`` value that leaves the output greedy ``generate``'s.
    exact: bool = True


@functools.cache
def model() -> torch.nn.Module:
    return tiny_model("nemotron_h")


@functools.cache
def greedy() -> list[int]:
    """Greedy ``generate``'s new tokens for ``PROMPT``: none of them the model's EOS (2)."""
    out: torch.Tensor = model().generate(PROMPT, max_new_tokens=MAX_NEW, do_sample=False)  # type: ignore[operator]
    tokens: list[int] = out[0, PROMPT.shape[1] :].tolist()
    assert len(tokens) == MAX_NEW
    assert 2 not in tokens
    return tokens


def filled_cache() -> DynamicCache:
    with torch.no_grad():
        cache: DynamicCache = model()(PROMPT, use_cache=True).cache
    return cache


def oks(*values: object, exact: bool = True) -> list[Arg]:
    return [Arg(v, "ok", exact) for v in values]


def bads(*values: object) -> list[Arg]:
    return [Arg(v, "bad") for v in values]


def maybes(*values: object) -> list[Arg]:
    return [Arg(v, "maybe") for v in values]


def returning(value: object) -> Callable[..., object]:  # type: ignore[explicit-any]
    return lambda *args: value


def _looping(tokens: list[int]) -> int:
    return max(len(tokens) - 2, 0)  # back past the newest token: loops without a budget


COUNTS = bads(-1, 1.5, "2", None, True, torch.tensor(2))
EOS = [*oks(None, 60, [60, 99], (), (17,)), *bads(-1, V, "x", [1.5], [True], True, 1.5, {"a"})]
#: 5 is a token of ``PROMPT``: without ``attention_mask`` its positions are masked as generate
#: masks them, a hole in the mask, which is refused (naming pad_token_id as the cause).
PAD = [*oks(None, 0, 10**6), *maybes(5), *bads(-1, "x", 1.5, True, [1])]
GENERATOR = [
    *oks(None),
    Arg(torch.Generator().manual_seed(1), "ok", exact=False),
    *bads(1, "x", torch.tensor(1), object()),
]
BOUNDARY_BAD = bads({"x"}, {-1}, {V}, "ab", 5, 1.5, torch.tensor([[1]]))
BOUNDARY_OK = oks(set(), {4, 8}, lambda t: t % 2 == 0, frozenset(range(0, V, 3)), torch.tensor([1]))
MASK = [
    *oks(None, torch.ones_like(PROMPT)),
    *bads(torch.zeros_like(PROMPT), torch.ones(3, dtype=torch.long), torch.ones(1, 8), "x", [[1]]),
]
UNKNOWN = {"foo": bads(1), "output_hidden_states": bads(True)}
#: A generation setting: used when sampling (a generator), as generate uses it; a bad one is
#: named when the sampling processors are built.
SETTINGS = {"temperature": [*oks(0.7), *maybes("x", -1.0)]}

SPECULATIVE: dict[str, list[Arg]] = {
    "max_new_tokens": [*oks(*range(1, MAX_NEW + 1)), *COUNTS, *bads(0)],
    "num_draft_tokens": [*oks(0, 1, 3, 5, 10**9), *COUNTS],
    "capacity": [*oks(0, 2, 10**12), *COUNTS],
    "draft": [
        *oks(
            "prompt_lookup",
            returning([]),
            lambda t, k: [7] * k,
            lambda t, k: tuple(range(k)),
            lambda t, k: torch.arange(k),
            lambda t, k: np.arange(k),
        ),
        *bads("x", None, 1, torch.tensor([1]), 1.5),
        *maybes(
            returning("abc"),
            returning(None),
            returning(torch.tensor([[5]])),
            returning([1.5]),
            returning([V]),
            returning([-1]),
            returning([True]),
            returning([5] * 50),
        ),
    ],
    "generator": GENERATOR,
    "eos_token_id": EOS,
    "pad_token_id": PAD,
    "is_boundary": [*oks(None), *BOUNDARY_OK, *BOUNDARY_BAD, *maybes(returning("x"))],
    "attention_mask": MASK,
    **UNKNOWN,
    **SETTINGS,
}

BACKTRACKING: dict[str, list[Arg]] = {
    "max_new_tokens": [*oks(*range(1, MAX_NEW + 1)), *COUNTS, *bads(0)],
    "capacity": [*oks(0, 2, 10**12), *COUNTS],
    "max_rollbacks": [*oks(0, 1, 3), *COUNTS],
    "is_boundary": [*BOUNDARY_OK, *BOUNDARY_BAD, *maybes(returning("x"))],
    "reject": [
        *oks(returning(None)),
        *oks(returning(0), lambda t: len(t) - 1, _looping, exact=False),
        *bads(None, 1, "x"),
        *maybes(returning("x"), returning(-1), returning(1.5), returning(True)),
    ],
    "ban": [
        *oks(None, [], [5, 6], torch.zeros(V, dtype=torch.bool), torch.tensor([1, 2]), range(3)),
        *bads([-1], [V], ["a"], torch.tensor([0.5]), torch.ones(V - 1, dtype=torch.bool), "ab"),
        *bads(5, torch.ones(2, V, dtype=torch.bool)),
    ],
    "generator": GENERATOR,
    "eos_token_id": EOS,
    "pad_token_id": PAD,
    "check_rollbacks": [*oks(False, True), *bads("yes", 1, None)],
    "progress": [*oks(None, returning(None)), *bads(1, "x")],
    "attention_mask": MASK,
    "past_key_values": [*oks(None), Arg("filled cache", "bad")],
    **UNKNOWN,
}
#: Keywords a call always passes (the backtracking decoder requires them).
REQUIRED = {"backtracking": ("max_new_tokens", "is_boundary", "reject"), "speculative": ()}


def draw_call(
    data: st.DataObject, table: dict[str, list[Arg]], required: tuple[str, ...]
) -> tuple[dict[str, Arg], str | None]:
    """Every keyword valid, or one of them bad or maybe (named in the second item)."""
    names = sorted(table)
    odd = data.draw(st.none() | st.sampled_from(names), label="odd keyword")
    valid = [name for name in names if any(a.verdict == "ok" for a in table[name])]
    chosen = data.draw(st.lists(st.sampled_from(valid), unique=True, max_size=5), label="keys")
    call: dict[str, Arg] = {}
    for key in sorted({*required, *chosen, *([] if odd is None else [odd])}):
        pool = [a for a in table[key] if (a.verdict != "ok") == (key == odd)]
        call[key] = data.draw(st.sampled_from(pool), label=key)
    return call, odd


def expected_tokens(call: dict[str, Arg]) -> list[int]:
    n = call["max_new_tokens"].value if "max_new_tokens" in call else MAX_NEW
    eos_arg = call["eos_token_id"].value if "eos_token_id" in call else None
    eos = {2} if eos_arg is None else {eos_arg} if isinstance(eos_arg, int) else set(eos_arg)  # type: ignore[call-overload]
    out: list[int] = []
    for token in greedy()[: int(n)]:  # type: ignore[call-overload]
        out.append(token)
        if token in eos:
            break
    return out


def check(decoder: Callable[..., GenerationResult], call: dict[str, Arg], odd: str | None) -> None:  # type: ignore[explicit-any]
    kwargs = {k: filled_cache() if a.value == "filled cache" else a.value for k, a in call.items()}
    kwargs.setdefault("max_new_tokens", MAX_NEW)
    if odd is not None and call[odd].verdict == "bad":
        with pytest.raises(SsmRollbackError) as raised:
            decoder(model(), PROMPT, **kwargs)
        assert odd in str(raised.value), (odd, str(raised.value))
        return
    try:
        result = decoder(model(), PROMPT, **kwargs)
    except SsmRollbackError as error:
        refused = str(error)
    else:
        refused = ""
    if refused:
        assert odd is not None, refused  # only a "maybe" keyword may raise here
        assert odd in refused.replace("(tokens, k)", "").replace("()", ""), (odd, refused)
        return
    new = result.sequences[0, PROMPT.shape[1] :].tolist()
    assert result.sequences[0, : PROMPT.shape[1]].tolist() == PROMPT[0].tolist()
    assert all(0 <= t < V for t in new)
    if all(a.exact for a in call.values()):
        assert new == expected_tokens(call)
    else:
        assert len(new) <= int(kwargs["max_new_tokens"])  # type: ignore[call-overload]


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data())
def test_speculative_keywords_decode_greedily_or_are_named(data: st.DataObject) -> None:
    call, odd = draw_call(data, SPECULATIVE, REQUIRED["speculative"])
    check(speculative_generate, paired(call, odd), odd)


def paired(call: dict[str, Arg], odd: str | None) -> dict[str, Arg]:
    """``capacity`` > 0 and ``is_boundary`` go together (either alone is refused, tested on
    its own): give a call the one it lacks, unless that one is the odd keyword."""
    capacity = call.get("capacity", Arg(0, "ok")).value != 0
    boundary = call.get("is_boundary", Arg(None, "ok")).value is not None
    if capacity and not boundary and odd != "capacity":
        return {**call, "is_boundary": BOUNDARY_OK[1]}
    if (boundary or odd == "is_boundary") and not capacity and odd != "capacity":
        return {**call, "capacity": Arg(2, "ok")}
    return call


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data())
def test_backtracking_keywords_decode_greedily_or_are_named(data: st.DataObject) -> None:
    call, odd = draw_call(data, BACKTRACKING, REQUIRED["backtracking"])
    if call["reject"].value is _looping and "max_rollbacks" not in call:
        call["max_rollbacks"] = Arg(2)  # a reject that loops ends only by its budget: keep it small
    check(backtracking_generate, call, odd)
