"""The vLLM connector's scheduler-side bookkeeping against a model worker; no vLLM needed.

Requests run as vLLM runs them with the connector: a hit loads in the step
after its match, the prompt is computed (and its end saved) in the next, and
a finished request's save runs a step later still, in the same step as the
next request's load. The model worker's "slots" hold token tuples: every
load must find its ticket, and the tokens it restores must be the prompt's
own prefix.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssm_rollback import InvalidArgumentError, PrefixSnapshotIndex
from ssm_rollback.integrations.vllm import UnsupportedEngineError
from ssm_rollback.integrations.vllm._ops import StepOps
from ssm_rollback.integrations.vllm._options import (
    check_engine,
    options_of,
    prefix_slots,
    request_options,
)
from ssm_rollback.integrations.vllm._scheduler import PrefixBook, RequestOptions

_TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=6)


class _Worker:
    def __init__(self) -> None:
        self.slots: dict[int, tuple[int, tuple[int, ...]]] = {}
        self.tokens: dict[str, tuple[int, ...]] = {}
        self.loaded: list[tuple[str, int]] = []

    def run(self, ops: StepOps, book: PrefixBook) -> None:
        for copy in ops.finished_saves:
            self.slots[copy.slot] = (copy.ticket, self.tokens[copy.req_id][: copy.length])
        for copy in ops.loads:
            held = self.slots.get(copy.slot)
            assert held is not None, "a load found an empty slot"
            assert held[0] == copy.ticket, "a load found a stale slot"
            assert held[1] == self.tokens[copy.req_id][: copy.length]
            self.loaded.append((copy.req_id, copy.length))
            book.load_done(copy.req_id, failed=False)
        for copy in ops.prompt_saves:
            self.slots[copy.slot] = (copy.ticket, self.tokens[copy.req_id][: copy.length])


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(0, 3),
    conversations=st.lists(
        st.tuples(_TOKENS, _TOKENS, st.integers(1, 4), st.booleans()), min_size=1, max_size=8
    ),
)
def test_every_load_finds_its_ticket_and_the_prompts_own_prefix(
    capacity: int, conversations: list[tuple[list[int], list[int], int, bool]]
) -> None:
    book = PrefixBook(PrefixSnapshotIndex(capacity))
    worker = _Worker()
    system = [7, 7, 7]
    history: list[int] = []
    for number, (user, output, kept, extend) in enumerate(conversations):
        req = f"r{number}"
        prompt = (history if extend else system) + user
        out = output[:kept]
        worker.tokens[req] = tuple(prompt + out)
        hit = book.match(req, prompt, RequestOptions())
        assert hit < len(prompt)
        book.allocated(req, [[number]], hit)
        worker.run(book.take_step(), book)  # the load, between steps
        book.scheduled(req, [[number]], hit, len(prompt) - hit, replace=True)
        worker.run(book.take_step(), book)  # the prompt and its end's save
        computed = len(prompt) + len(out) - 1
        book.finished(req, prompt + out, computed, [[number]])  # saved with the next step
        history = prompt + out
    worker.run(book.take_step(), book)
    book.index.check_valid()
    assert all(length > 0 for _, length in worker.loaded)


def test_a_failed_load_discards_its_entry_so_the_request_recomputes() -> None:
    book = PrefixBook(PrefixSnapshotIndex(2))
    book.match("a", [1, 2, 3], RequestOptions())
    book.allocated("a", [[0]], 0)
    book.scheduled("a", [[0]], 0, 3)
    assert book.take_step().prompt_saves[0].length == 3
    assert book.match("b", [1, 2, 3, 4], RequestOptions()) == 3
    book.allocated("b", [[1]], 3)
    assert len(book.take_step().loads) == 1
    book.load_done("b", failed=True)  # the slot no longer held the ticket
    assert book.index.entries() == ()
    assert book.match("b", [1, 2, 3, 4], RequestOptions()) == 0


def test_a_request_may_withhold_its_load_and_its_publish() -> None:
    book = PrefixBook(PrefixSnapshotIndex(2))
    quiet = RequestOptions(load=False, publish=False)
    book.match("a", [1, 2, 3], quiet)
    book.scheduled("a", [[0]], 0, 3, replace=True)
    assert book.take_step() == StepOps()
    assert not book.finished("a", [1, 2, 3, 4, 5], 4, [[0]])
    assert book.index.entries() == ()


def test_request_options_are_checked_and_named() -> None:
    assert request_options(None) == RequestOptions()
    assert request_options({"ssm_rollback": {"publish": False}}) == RequestOptions(publish=False)
    bads: list[dict[str, object]] = [
        {"ssm_rollback": []},
        {"ssm_rollback": {"lod": True}},
        {"ssm_rollback": {"load": 1}},
    ]
    for bad in bads:
        with pytest.raises(InvalidArgumentError, match=r"ssm_rollback|load"):
            request_options(bad)


def test_a_step_that_runs_past_the_prompt_end_publishes_nothing_there() -> None:
    """A preempted request resumes by computing its prompt and its output in one step: the
    state after that step is not the prompt end's, which was published under it, and a later
    request extending the prompt restored the wrong state."""
    book = PrefixBook(PrefixSnapshotIndex(2))
    book.match("c", list(range(100)), RequestOptions())
    book.allocated("c", [[0]], 0)
    book.scheduled("c", [[0]], 0, 385, replace=True)  # prompt 100 + output 285, recomputed
    assert book.take_step().prompt_saves == ()
    book.match("d", list(range(10)), RequestOptions())
    book.allocated("d", [[1]], 0)
    book.scheduled("d", [[1]], 0, 4)  # a chunk of the prompt: not its end either
    book.scheduled("d", None, 4, 6)  # the last chunk ends there: published
    assert [s.length for s in book.take_step().prompt_saves] == [10]


def test_a_request_of_a_lora_adapter_or_a_salt_shares_no_prefix() -> None:
    """Entries are keyed by token ids alone: a LoRA request loaded the base model's state,
    and a salted one another tenant's."""
    assert options_of(None, shared=False) == RequestOptions(load=False, publish=False)
    assert options_of({"ssm_rollback": {"publish": False}}, shared=True) == RequestOptions(
        publish=False
    )
    with pytest.raises(InvalidArgumentError, match="'load' must be True or False"):
        options_of({"ssm_rollback": {"load": "no"}}, shared=False)


def test_extra_config_takes_prefix_slots_only_and_names_it() -> None:
    assert prefix_slots(None) == 16
    assert prefix_slots({"prefix_slots": 3}) == 3
    with pytest.raises(
        UnsupportedEngineError, match=r"takes 'prefix_slots' only, got \['prefix_slot'\]"
    ):
        prefix_slots({"prefix_slot": 0})
    with pytest.raises(UnsupportedEngineError, match="'prefix_slots' must be at most 16,777,216"):
        prefix_slots({"prefix_slots": 10**9})


class _Attention:
    def __init__(self, sliding_window: int | None = None) -> None:
        self.block_size, self.sliding_window = 16, sliding_window


class _Mamba:
    def __init__(self, mode: str = "none") -> None:
        self.block_size, self.mamba_cache_mode = 16, mode


def _engine(**changes: object) -> SimpleNamespace:
    settings = {"role": "kv_both", "tp": 1, "caching": False, "speculative": None} | changes
    return SimpleNamespace(
        speculative_config=settings["speculative"],
        kv_transfer_config=SimpleNamespace(kv_role=settings["role"]),
        parallel_config=SimpleNamespace(
            tensor_parallel_size=settings["tp"], pipeline_parallel_size=1, data_parallel_size=1
        ),
        cache_config=SimpleNamespace(enable_prefix_caching=settings["caching"]),
    )


def _groups(*specs: object) -> SimpleNamespace:
    return SimpleNamespace(
        kv_cache_groups=[
            SimpleNamespace(kv_cache_spec=spec, layer_names=[f"layer.{i}"])
            for i, spec in enumerate(specs)
        ]
    )


def test_an_engine_the_connector_cannot_serve_is_refused_by_name() -> None:
    kinds = (_Attention, _Mamba)
    groups = check_engine(_engine(), _groups(_Attention(), _Mamba()), kinds)
    assert [g.ssm for g in groups] == [False, True]
    refused = [
        (_engine(role="kv_producer"), _groups(_Attention()), "kv_role"),
        (_engine(tp=2), _groups(_Attention()), "tensor_parallel_size"),
        (_engine(caching=True), _groups(_Attention()), "enable_prefix_caching"),
        (_engine(speculative=object()), _groups(_Attention()), "speculative_config"),
        (_engine(), _groups(_Attention(sliding_window=8)), "KV cache group 0"),
        (_engine(), _groups(_Attention(), _Mamba("align")), "KV cache group 1"),
        (_engine(), _groups(), "no KV cache groups"),
    ]
    for engine, layout, named in refused:
        with pytest.raises(UnsupportedEngineError, match=named):
            check_engine(engine, layout, kinds)
