"""The torch pool: conformance on CPU (and CUDA when present), exactness, op counts, errors."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import pytest

pytest.importorskip("torch")

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ssm_rollback import (
    InvalidArgumentError,
    SsmDecodeRing,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
    StaleSnapshotError,
    apply_effects,
)
from ssm_rollback.backends._torch_copy import WIDE_ROW_BYTES, Copier, RowSet
from ssm_rollback.backends.torch import TorchSnapshotPool
from ssm_rollback.testing import PoolAdapter, SnapshotPoolConformance, SnapshotPoolMachine

HAS_CUDA = torch.cuda.is_available()
LAYERS = 2
STAGED = 3  # intermediate states per row: a verify step of 2 drafts


class Case(NamedTuple):
    device: str
    dtype: torch.dtype
    batch_dim: int
    contiguous: bool = True
    #: Copy scattered rows with index ops even on the CPU: the path a GPU
    #: (or more than one CPU thread) takes, so it runs where there is no GPU.
    #: Else CPU pools copy them row by row, whatever the thread count.
    index_ops: bool = False

    @property
    def id(self) -> str:
        layout = "contiguous" if self.contiguous else "strided"
        dtype = str(self.dtype).removeprefix("torch.")
        ops = "-index-ops" if self.index_ops else ""
        return f"{self.device}-{dtype}-dim{self.batch_dim}-{layout}{ops}"


def make_pool(
    case: Case, states: list[torch.Tensor], slots: int, **kwargs: object
) -> TorchSnapshotPool:
    """A pool over ``states`` that copies scattered rows as ``case`` says."""
    pool = TorchSnapshotPool(states, slots, batch_dim=case.batch_dim, **kwargs)  # type: ignore[arg-type]
    if case.device == "cpu":
        rows = pool._live_rows.tensors
        pool._copier = Copier(rows, case.batch_dim, per_row=not case.index_ops)
    return pool


def make_states(
    case: Case, rows: int, generator: torch.Generator | None = None
) -> list[torch.Tensor]:
    """A conv and an SSM state per layer: separate [B, ...] tensors, or stacked [L, B, ...]."""
    conv, ssm = (12, 4), (3, 4, 5)
    if case.batch_dim == 0:
        shapes = [(rows, *conv), (rows, *ssm)] * LAYERS
    else:
        shapes = [(LAYERS, rows, *conv), (LAYERS, rows, *ssm)]
    states = []
    for shape in shapes:
        if case.contiguous:
            full = torch.randn(shape, generator=generator)
        else:  # a view into a wider buffer, as an engine's state slices often are
            full = torch.randn((*shape[:-1], shape[-1] + 3), generator=generator)[..., 1:-2]
        states.append(full.to(device=case.device, dtype=case.dtype))
    if not case.contiguous:
        states = [s if not s.is_contiguous() else s.t() for s in states]
    return states


CASES = [
    Case("cpu", dtype, batch_dim)
    for dtype in (torch.float32, torch.bfloat16, torch.float16)
    for batch_dim in (0, 1)
] + [
    Case("cpu", torch.float32, 0, contiguous=False),
    Case("cpu", torch.float64, 1),
    Case("cpu", torch.bfloat16, 1, index_ops=True),
    Case("cpu", torch.float32, 0, contiguous=False, index_ops=True),
    Case("cuda", torch.bfloat16, 0),
    Case("cuda", torch.float32, 1),
]


def skip_unavailable(case: Case) -> None:
    if case.device == "cuda" and not HAS_CUDA:
        pytest.skip("no CUDA device here")


class TorchAdapter(PoolAdapter[TorchSnapshotPool]):
    """Pools over the live tensors of one ``Case``."""

    case: Case

    def make_pool(self, num_sequences: int, slots_per_sequence: int) -> TorchSnapshotPool:
        return self.make_shared_pool(num_sequences, slots_per_sequence, 0)

    def make_shared_pool(
        self, num_sequences: int, slots_per_sequence: int, shared_slots: int
    ) -> TorchSnapshotPool:
        states = make_states(self.case, num_sequences)
        dim = self.case.batch_dim
        staged = [
            torch.zeros((*s.shape[: dim + 1], STAGED, *s.shape[dim + 1 :]), dtype=s.dtype).to(
                s.device
            )
            for s in states
        ]
        return make_pool(
            self.case,
            states,
            slots_per_sequence,
            intermediate_states=staged,
            shared_slots=shared_slots,
        )

    def fail_shared_saves(
        self, pool: TorchSnapshotPool, predicate: Callable[[SsmPrefixSave], bool]
    ) -> bool:
        pool.fail_shared_when(predicate)
        return True

    def set_intermediate(self, pool: TorchSnapshotPool, seq: int, values: list[int]) -> bool:
        assert len(values) == STAGED
        for buffer in pool.intermediate_states:
            for j, value in enumerate(values):
                buffer.select(pool.batch_dim, seq).select(pool.batch_dim, j).fill_(value)
        return True

    def set_live(self, pool: TorchSnapshotPool, seq: int, value: int) -> None:
        for state in pool.live_states:
            state.select(pool.batch_dim, seq).fill_(value)

    def fail_saves(
        self, pool: TorchSnapshotPool, predicate: Callable[[SsmSnapshotSave], bool]
    ) -> bool:
        pool.fail_when(predicate)
        return True

    def get_live(self, pool: TorchSnapshotPool, seq: int) -> int:
        values = set()
        for state in pool.live_states:
            values.update(state.select(pool.batch_dim, seq).float().flatten().tolist())
        assert len(values) == 1, f"row {seq} holds a mix of states: {sorted(values)}"
        return int(values.pop())


class TestTorchPoolConformance(TorchAdapter, SnapshotPoolConformance[TorchSnapshotPool]):
    @pytest.fixture(autouse=True, params=CASES, ids=[c.id for c in CASES])
    def _case(self, request: pytest.FixtureRequest) -> None:
        case: Case = request.param
        skip_unavailable(case)
        self.case = case


class StackedAdapter(TorchAdapter):
    """Layers stacked as ``[L, B, ...]`` in bfloat16, the layout engines use."""

    case = Case("cpu", torch.bfloat16, 1)


TestTorchPoolMachine = SnapshotPoolMachine.for_adapter(StackedAdapter()).TestCase


def as_bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_restores_are_bitwise_exact_for_random_state(case: Case) -> None:
    skip_unavailable(case)
    generator = torch.Generator().manual_seed(0)
    states = make_states(case, 16, generator)
    pool = make_pool(case, states, 3)
    rows = [5, 0, 11, 3, 15, 8]  # shuffled and scattered
    saved = [s.select(case.batch_dim, 0).clone() for s in states]  # shape reference
    saved = [s.index_select(case.batch_dim, torch.tensor(rows, device=s.device)) for s in states]
    pool.save([SsmSnapshotSave(seq, seq % 3, 40 + seq, 40 + seq) for seq in rows])
    for state in states:
        state.copy_(torch.randn(state.shape, generator=generator).to(state))
    untouched = [s.clone() for s in states]
    restored_rows = rows[::2]
    pool.restore([SsmSnapshotRestore(seq, seq % 3, 40 + seq, 40 + seq) for seq in restored_rows])
    for state, before, snap in zip(states, untouched, saved, strict=True):
        for i, seq in enumerate(rows):
            row = state.select(case.batch_dim, seq)
            if seq in restored_rows:
                expected = snap.select(case.batch_dim, i)
            else:
                expected = before.select(case.batch_dim, seq)
            assert torch.equal(as_bits(row.contiguous()), as_bits(expected.contiguous()))


class OpCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves it untyped
    """Records every aten op dispatched while it is active."""

    ops: list[str]

    def __torch_dispatch__(  # type: ignore[explicit-any]  # the base signature uses Any
        self,
        func: torch._ops.OpOverload,
        types: object,
        args: tuple[object, ...] = (),
        kwargs: dict[str, object] | None = None,
    ) -> object:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def count_ops(call: Callable[[], object]) -> list[str]:
    counter = OpCounter()  # type: ignore[no-untyped-call]
    counter.ops = []
    with counter:
        call()
    return counter.ops


COPY_OPS = ("aten.index_copy_.default", "aten.index_select.out", "aten._foreach_copy_.default")


def copies(ops: list[str]) -> int:
    return sum(op in COPY_OPS for op in ops)


def test_the_op_count_of_a_save_or_restore_does_not_grow_with_the_batch() -> None:
    case = Case("cpu", torch.float32, 0)
    pool = make_pool(case, make_states(case, 1_024), 2)
    tensors = len(pool.live_states)
    everyone = list(range(1_024))
    torch.manual_seed(0)
    shuffled = [everyone[i] for i in torch.randperm(1_024).tolist()]
    scattered = everyone[::3]
    pool.save([SsmSnapshotSave(s, 0, 3, 3) for s in scattered])  # warm: the row views, once
    pool.restore([SsmSnapshotRestore(s, 0, 3, 3) for s in scattered])
    # Destination rows that form a range, in any order: one index_select per tensor.
    one = count_ops(lambda: pool.save([SsmSnapshotSave(7, 0, 1, 1)]))
    # Anything else: one single-pass _foreach_copy_ per tensor over the rows' views.
    many = count_ops(lambda: pool.save([SsmSnapshotSave(s, 1, 2, 2) for s in shuffled]))
    every_row = count_ops(lambda: pool.restore([SsmSnapshotRestore(s, 1, 2, 2) for s in shuffled]))
    # Every row of the pool needs no view of them (no slice op): fewer ops, never more.
    assert len(every_row) <= len(one) <= 2 * tensors + 3
    assert copies(one) == copies(every_row) == tensors
    two = count_ops(lambda: pool.save([SsmSnapshotSave(s, 0, 4, 4) for s in (3, 9)]))
    third = count_ops(lambda: pool.save([SsmSnapshotSave(s, 0, 5, 5) for s in scattered]))
    restore_two = count_ops(lambda: pool.restore([SsmSnapshotRestore(s, 0, 5, 5) for s in (3, 9)]))
    restore_third = count_ops(
        lambda: pool.restore([SsmSnapshotRestore(s, 0, 5, 5) for s in scattered])
    )
    for ops in (many, two, third, restore_two, restore_third):
        assert ops == ["aten._foreach_copy_.default"] * tensors  # nothing else, nothing allocated


@pytest.mark.parametrize("threads", [1, 2])
def test_the_cpu_copies_wide_rows_one_by_one_and_only_on_one_thread(threads: int) -> None:
    # Every row's own copy opens a parallel region when torch has threads to
    # split it over; on a busy machine each region waits for a time slice.
    # Narrow rows are cheaper through the index ops: their scratch stays in cache.
    narrow = torch.zeros(1, 16, WIDE_ROW_BYTES // 4 - 1)  # float32: one element short
    wide = torch.zeros(2, 16, WIDE_ROW_BYTES // 8)  # two stacked halves make a row
    pool = TorchSnapshotPool([narrow, wide], 2, batch_dim=1)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ops = count_ops(lambda: pool.save([SsmSnapshotSave(s, 0, 1, 1) for s in (9, 2, 5)]))
    finally:
        torch.set_num_threads(before)
    copied = [op for op in ops if op in COPY_OPS]
    if threads == 1:
        gather_scatter = ["aten.index_select.out", "aten.index_copy_.default"]
        assert copied == ["aten._foreach_copy_.default", *gather_scatter]
    else:
        assert copied == ["aten.index_select.out", "aten.index_copy_.default"] * 2


def test_off_the_cpu_the_op_count_does_not_grow_with_the_batch_either() -> None:
    case = Case("cpu", torch.float32, 0, index_ops=True)  # the copies a GPU runs
    pool = make_pool(case, make_states(case, 1_024), 2)
    tensors = len(pool.live_states)
    everyone = list(range(1_024))
    torch.manual_seed(0)
    shuffled = [everyone[i] for i in torch.randperm(1_024).tolist()]
    scattered = everyone[::3]
    pool.save([SsmSnapshotSave(s, 0, 3, 3) for s in scattered])  # warm: the scratch grows once
    # A range of rows, in any order: one op per tensor on a view of the live rows.
    one = count_ops(lambda: pool.save([SsmSnapshotSave(7, 0, 1, 1)]))
    many = count_ops(lambda: pool.save([SsmSnapshotSave(s, 1, 2, 2) for s in shuffled]))
    assert len(many) <= len(one) <= 2 * tensors + 3  # all rows: no view needed
    assert copies(one) == copies(many) == tensors
    # Scattered rows: a gather into the kept scratch buffer, then one scatter per tensor.
    two = count_ops(lambda: pool.save([SsmSnapshotSave(s, 0, 4, 4) for s in (3, 9)]))
    third = count_ops(lambda: pool.save([SsmSnapshotSave(s, 0, 5, 5) for s in scattered]))
    assert len(two) == len(third) <= 4 * tensors + 3
    assert copies(third) == 2 * tensors  # a gather and a scatter
    assert not [op for op in third if "empty" in op]  # nothing allocated once warm
    restore_one = count_ops(lambda: pool.restore([SsmSnapshotRestore(7, 0, 1, 1)]))
    restore_many = count_ops(
        lambda: pool.restore([SsmSnapshotRestore(s, 1, 2, 2) for s in shuffled])
    )
    assert len(restore_many) <= len(restore_one) <= 2 * tensors + 3
    restore_two = count_ops(lambda: pool.restore([SsmSnapshotRestore(s, 0, 5, 5) for s in (3, 9)]))
    restore_third = count_ops(
        lambda: pool.restore([SsmSnapshotRestore(s, 0, 5, 5) for s in scattered])
    )
    assert len(restore_two) == len(restore_third) <= 4 * tensors + 3
    assert not [op for op in restore_third if "empty" in op]


@pytest.mark.parametrize(
    ("index_ops", "op"),
    [(False, "aten._foreach_copy_.default"), (True, "aten.index_copy_.default")],
)
def test_stacked_layers_are_one_copy_per_tensor_not_per_layer(index_ops: bool, op: str) -> None:
    case = Case("cpu", torch.float32, 1, index_ops=index_ops)
    pool = make_pool(case, make_states(case, 64), 2)
    ops = count_ops(lambda: pool.save([SsmSnapshotSave(s, 0, 1, 1) for s in range(0, 64, 2)]))
    assert ops.count(op) == len(pool.live_states) == 2
    assert copies(ops) == (4 if index_ops else 2)  # off the CPU: a gather and a scatter each


def test_nbytes_is_what_bytes_needed_planned() -> None:
    states = make_states(Case("cpu", torch.bfloat16, 0), 8)
    live_bytes = sum(s.numel() * s.element_size() for s in states)
    assert TorchSnapshotPool.bytes_needed(states, 4) == 4 * live_bytes
    pool = TorchSnapshotPool(states, 4)
    assert pool.nbytes == 4 * live_bytes
    assert TorchSnapshotPool(states, 0).nbytes == 0
    assert pool.device == torch.device("cpu")
    assert repr(pool).startswith("TorchSnapshotPool(num_sequences=8, slots_per_sequence=4")


@pytest.mark.parametrize("index_ops", [False, True])
def test_live_state_that_requires_grad_is_copied_without_autograd(index_ops: bool) -> None:
    state = torch.arange(12.0).reshape(4, 3).requires_grad_()
    pool = make_pool(Case("cpu", torch.float32, 0, index_ops=index_ops), [state], 2)
    pool.save([SsmSnapshotSave(1, 0, 1, 1)])  # a range of storage rows
    pool.save([SsmSnapshotSave(s, 1, 2, 2) for s in (3, 0)])  # scattered: the row views
    with torch.no_grad():
        state.zero_()
    pool.restore([SsmSnapshotRestore(1, 0, 1, 1)])
    pool.restore([SsmSnapshotRestore(s, 1, 2, 2) for s in (0, 3)])
    assert state.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [0.0] * 3, [9.0, 10.0, 11.0]]
    assert state.grad_fn is None  # still a leaf: no copy was recorded
    assert state.requires_grad


def test_apply_effects_drives_the_torch_pool() -> None:
    state = torch.arange(4.0).repeat_interleave(3).reshape(4, 3)
    pool = TorchSnapshotPool([state], 2)
    rings = [SsmDecodeRing(2) for _ in range(4)]
    effects = []
    for seq, ring in enumerate(rings):
        slot = ring.record(5)
        assert slot is not None
        effects.append(SsmSnapshotSave(seq, slot, 5, 5))
    apply_effects(pool, effects, rings)
    state.fill_(-1)
    apply_effects(pool, [SsmSnapshotRestore(2, 0, 5, 5)], rings)
    assert state[2].tolist() == [2.0, 2.0, 2.0]
    assert state[1].tolist() == [-1.0, -1.0, -1.0]


@pytest.mark.parametrize("index_ops", [False, True])
def test_a_copy_that_raises_leaves_the_batch_holding_nothing(index_ops: bool) -> None:
    case = Case("cpu", torch.float32, 0, index_ops=index_ops)
    pool = make_pool(case, [torch.zeros(4, 3), torch.zeros(4, 2)], 1)
    pool.save([SsmSnapshotSave(0, 0, 1, 1)])
    # A storage too small for the second tensor: its copy raises after the first copied.
    storage = pool._storage_rows.tensors
    pool._storage_rows = RowSet([storage[0], pool._live_rows.tensors[1][:1].clone()], 0)
    with pytest.raises(IndexError):
        pool.save([SsmSnapshotSave(0, 0, 2, 2), SsmSnapshotSave(3, 0, 2, 2)])
    assert pool.stored_position(0, 0) is None
    with pytest.raises(StaleSnapshotError):
        pool.restore([SsmSnapshotRestore(0, 0, 1, 1)])


@pytest.mark.parametrize(
    ("states", "kwargs", "message"),
    [
        ([], {}, "at least one tensor"),
        (torch.zeros(2, 3), {}, "must be a sequence of torch tensors"),
        ([torch.zeros(2, 3), "x"], {}, r"'live_states\[1\]' must be a torch.Tensor"),
        ([torch.zeros(2, 3, dtype=torch.int32)], {}, "must have one of the dtypes"),
        ([torch.zeros(2, 3), torch.zeros(3, 3)], {}, "same rows on batch_dim 0, got 2"),
        ([torch.zeros(3, 2), torch.zeros(3, 3)], {"batch_dim": 1}, "same rows on batch_dim 1"),
        ([torch.zeros(2)], {"batch_dim": 1}, "must have a dim 1"),
        ([torch.zeros(2, 3), torch.zeros(2, 3, device="meta")], {}, "on one device"),
        ([torch.zeros(2, 3)], {"batch_dim": -1}, "'batch_dim' must be an int >= 0"),
        ([torch.zeros(2, 3)], {"batch_dim": True}, "'batch_dim' must be an int >= 0"),
        ([torch.zeros(2, 3)], {"slots_per_sequence": -2}, "'slots_per_sequence'"),
        # One row's memory in three rows: restoring row 0 rewrote rows 1 and 2.
        ([torch.zeros(1, 4).expand(3, 4)], {}, r"'live_states\[0\]' must not hold one element"),
        ([torch.zeros(10).as_strided((3, 4), (2, 1))], {}, "overlapping strides"),
    ],
)
def test_construction_errors_name_the_problem(
    states: object, kwargs: dict[str, object], message: str
) -> None:
    slots = kwargs.pop("slots_per_sequence", 2)
    with pytest.raises(InvalidArgumentError, match=message):
        TorchSnapshotPool(states, slots, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=message):
        TorchSnapshotPool.bytes_needed(states, slots, **kwargs)  # type: ignore[arg-type]


def test_a_live_state_inside_its_own_intermediate_buffer_is_refused() -> None:
    """The live ssm state as state 0 of the per-draft buffer was taken: an accept then copied
    the buffer into itself, and torch refused it after the conv tensor had moved (the row
    half accepted, its ticket not recorded)."""
    buffers = [torch.zeros(4, 3, 8), torch.zeros(4, 3, 16)]
    live = [torch.zeros(4, 8), buffers[1][:, 0]]
    with pytest.raises(InvalidArgumentError, match=r"'intermediate_states\[1\]' must not share"):
        TorchSnapshotPool(live, 2, intermediate_states=buffers)
    apart = [torch.zeros(4, 8), torch.zeros(4, 16)]  # the same shapes, memory of their own
    pool = TorchSnapshotPool(apart, 2, intermediate_states=buffers)
    buffers[1][3, 2] = 12.0
    pool.accept([SsmStateAccept(3, 2, 7)])
    assert apart[1][3].tolist() == [12.0] * 16


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device here")
def test_cuda_save_and_restore_never_synchronise_with_the_host() -> None:
    states = make_states(Case("cuda", torch.bfloat16, 0), 256)
    pool = TorchSnapshotPool(states, 2)
    torch.cuda.synchronize()
    try:
        with warnings.catch_warnings():  # torch warns that the mode is a prototype
            warnings.simplefilter("ignore", UserWarning)
            torch.cuda.set_sync_debug_mode("error")
        pool.save([SsmSnapshotSave(s, s % 2, 9, 9) for s in range(0, 256, 3)])
        pool.restore([SsmSnapshotRestore(s, s % 2, 9, 9) for s in range(0, 256, 6)])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_contiguous_range_of_rows_is_restored_in_place_exactly(case: Case) -> None:
    skip_unavailable(case)
    generator = torch.Generator().manual_seed(1)
    states = make_states(case, 12, generator)
    pool = make_pool(case, states, 2)
    pool.save([SsmSnapshotSave(seq, seq % 2, 3, 3) for seq in range(12)])
    snapshot = [s.clone() for s in states]
    for state in states:
        state.copy_(torch.randn(state.shape, generator=generator).to(state))
    before = [s.clone() for s in states]
    pool.restore([SsmSnapshotRestore(seq, seq % 2, 3, 3) for seq in (7, 5, 6, 4)])  # rows 4..7
    for state, old, snap in zip(states, before, snapshot, strict=True):
        for seq in range(12):
            expected = (snap if 4 <= seq <= 7 else old).select(case.batch_dim, seq)
            got = state.select(case.batch_dim, seq)
            assert torch.equal(as_bits(got.contiguous()), as_bits(expected.contiguous())), seq


@pytest.mark.parametrize("batch_dim", [0, 1])
def test_a_range_of_rows_saved_into_scattered_slots_by_index_ops_is_those_rows(
    batch_dim: int,
) -> None:
    """The index ops' source-range path (one ``index_copy_`` from a ``narrow`` view) reading
    from row 0 instead of the range's first row.

    Rows 4..7 saved into slot 0 of a two-slot pool: the source rows form a
    range that does not start at 0, the storage rows (8, 10, 12, 14) do not.
    """
    case = Case("cpu", torch.float32, batch_dim, index_ops=True)
    generator = torch.Generator().manual_seed(2)
    states = make_states(case, 8, generator)
    pool = make_pool(case, states, 2)
    rows = (6, 4, 7, 5)
    pool.save([SsmSnapshotSave(seq, 0, 3, 3) for seq in rows])
    saved = [s.clone() for s in states]
    for state in states:
        state.zero_()
    pool.restore([SsmSnapshotRestore(seq, 0, 3, 3) for seq in rows])
    for state, old in zip(states, saved, strict=True):
        for seq in range(8):
            got = state.select(batch_dim, seq)
            if seq in rows:
                assert torch.equal(got, old.select(batch_dim, seq)), seq
            else:
                assert not got.any(), seq


def test_rows_are_copied_as_wide_integers_when_the_layout_allows() -> None:
    pool = TorchSnapshotPool([torch.zeros(4, 3, 8, dtype=torch.bfloat16)], 2)
    live_rows, storage_rows = (pool._live_rows.tensors[0], pool._storage_rows.tensors[0])
    assert (live_rows.dtype, tuple(live_rows.shape)) == (torch.int64, (4, 6))
    assert tuple(storage_rows.shape) == (8, 6)
    odd = TorchSnapshotPool([torch.zeros(4, 3, dtype=torch.float16)], 2)  # 6-byte rows
    assert odd._live_rows.tensors[0].dtype == torch.int16


# -- memory the pool no longer owns ---------------------------------------------------


def _repoint_data(live: torch.Tensor) -> None:
    live.data = torch.zeros_like(live)


def _resize(live: torch.Tensor) -> None:
    live.resize_(live.shape[0] + 1, *live.shape[1:])


def _set_other_storage(live: torch.Tensor) -> None:
    other = torch.zeros_like(live)
    live.set_(other.untyped_storage(), 0, other.shape, other.stride())


def _set_shifted_view(live: torch.Tensor) -> None:
    # Same storage, one row on: every copy would land in the neighbouring row.
    shape = [live.shape[0] - 1, *live.shape[1:]]
    live.set_(live.untyped_storage(), live[1:].storage_offset(), shape, live[1:].stride())


def _set_same_storage_transposed(live: torch.Tensor) -> None:
    live.set_(live.untyped_storage(), 0, live.shape, list(reversed(live.stride())))


def _to_float64(live: torch.Tensor) -> None:
    live.data = live.data.double()


@pytest.mark.parametrize(
    "replace",
    [
        _repoint_data,
        _resize,
        _set_other_storage,
        _set_shifted_view,
        _set_same_storage_transposed,
        _to_float64,
    ],
)
@pytest.mark.parametrize("operation", ["save", "restore"])
def test_memory_the_pool_no_longer_owns_is_refused(
    replace: Callable[[torch.Tensor], None], operation: str
) -> None:
    conv = torch.arange(4 * 6, dtype=torch.float32).reshape(4, 6)
    ssm = torch.arange(4 * 2 * 3, dtype=torch.float32).reshape(4, 2, 3)
    pool = TorchSnapshotPool([conv, ssm], 2)
    pool.save([SsmSnapshotSave(seq, 0, 5, 5) for seq in range(4)])
    tags = [(pool.stored_position(s, 0), pool.stored_ticket(s, 0)) for s in range(4)]
    replace(ssm)
    before = ssm.clone(), conv.clone()
    call: Callable[[], object] = (
        (lambda: pool.save([SsmSnapshotSave(0, 1, 6, 6)]))
        if operation == "save"
        else (lambda: pool.restore([SsmSnapshotRestore(seq, 0, 5, 5) for seq in range(4)]))
    )
    with pytest.raises(InvalidArgumentError, match=r"'live_states\[1\]' must still be the memory"):
        call()
    assert torch.equal(ssm, before[0])
    assert torch.equal(conv, before[1])  # the tensor that did not move was not written either
    assert [(pool.stored_position(s, 0), pool.stored_ticket(s, 0)) for s in range(4)] == tags
    assert pool.stored_position(0, 1) is None


@pytest.mark.parametrize("operation", ["save_shared", "restore_shared"])
def test_shared_copies_into_memory_the_pool_no_longer_owns_are_refused(operation: str) -> None:
    ssm = torch.arange(4 * 2 * 3, dtype=torch.float32).reshape(4, 2, 3)
    pool = TorchSnapshotPool([ssm], 1, shared_slots=2)
    pool.save_shared([SsmPrefixSave(0, 0, 5, 5)])
    _set_other_storage(ssm)
    before = ssm.clone()
    call: Callable[[], object] = (
        (lambda: pool.save_shared([SsmPrefixSave(1, 1, 6, 6)]))
        if operation == "save_shared"
        else (lambda: pool.restore_shared([SsmPrefixRestore(1, 0, 5, 5)]))
    )
    with pytest.raises(InvalidArgumentError, match=r"'live_states\[0\]' must still be the memory"):
        call()
    assert torch.equal(ssm, before)
    assert pool.stored_shared_ticket(0) == 5
    assert pool.stored_shared_ticket(1) is None


def test_in_place_writes_to_owned_memory_are_fine() -> None:
    live = torch.zeros(3, 4)
    pool = TorchSnapshotPool([live], 1)
    live.fill_(2.0)  # what decoding does
    live[1].copy_(torch.ones(4))
    assert pool.save([SsmSnapshotSave(1, 0, 1, 1)]).ok
    live.zero_()
    pool.restore([SsmSnapshotRestore(1, 0, 1, 1)])
    assert live[1].tolist() == [1.0] * 4


@pytest.mark.parametrize("bad", [42, "always", object()])
def test_fail_when_refuses_a_non_callable(bad: object) -> None:
    pool = TorchSnapshotPool([torch.zeros(2, 3)], 1)
    with pytest.raises(InvalidArgumentError, match="'predicate' must be a callable"):
        pool.fail_when(bad)  # type: ignore[arg-type]
    assert pool.save([SsmSnapshotSave(0, 0, 1, 1)]).ok  # faults stay off


def test_storage_that_cannot_be_allocated_is_a_library_error() -> None:
    with pytest.raises(InvalidArgumentError, match="'slots_per_sequence'"):
        TorchSnapshotPool([torch.zeros(2, 1024)], 10**15)


@pytest.mark.parametrize("index_ops", [False, True])
def test_a_verify_steps_op_count_does_not_grow_with_the_rows(index_ops: bool) -> None:
    case = Case("cpu", torch.bfloat16, 1, index_ops=index_ops)
    states = make_states(case, 512)
    staged = [torch.zeros((s.shape[0], 512, 4, *s.shape[2:]), dtype=s.dtype) for s in states]
    pool = make_pool(case, states, 2, intermediate_states=staged)
    tensors = len(states)

    def step(rows: list[int], ticket: int) -> list[str]:
        # Each step's tickets newer than the last's: an older save is refused (rule 6).
        warm = [SsmSnapshotSave(s, 0, 5, ticket, source=s % 4) for s in rows]
        saves = [SsmSnapshotSave(s, 0, 5, ticket + 1, source=s % 4) for s in rows]
        accepts = [SsmStateAccept(s, (s + 1) % 4) for s in rows]
        pool.save(warm)  # warm: the row views (or the scratch buffer) made once
        pool.accept(accepts)

        def verify() -> None:
            pool.save(saves)
            pool.accept(accepts)

        return count_ops(verify)

    two, many = step([3, 9], 5), step(list(range(0, 512, 3)), 7)
    assert len(two) == len(many)
    if index_ops:
        assert copies(many) <= 4 * tensors  # a gather and a scatter per tensor, per kind of copy
    else:
        assert many == ["aten._foreach_copy_.default"] * (2 * tensors)  # one per tensor and kind


# -- shared slots (SPEC 13) ------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_one_shared_slot_restores_bitwise_into_scattered_rows(case: Case) -> None:
    # Several rows read one shared slot: the source rows repeat, which must not
    # be taken for a range of source rows (rows [0, 0, 2] span three values).
    skip_unavailable(case)
    generator = torch.Generator().manual_seed(1)
    states = make_states(case, 16, generator)
    pool = make_pool(case, states, 1, shared_slots=3)
    shared_rows = [4, 7, 12]
    kept = [s.index_select(case.batch_dim, torch.tensor(shared_rows).to(s.device)) for s in states]
    pool.save_shared([SsmPrefixSave(seq, k, 10 + k, 20 + k) for k, seq in enumerate(shared_rows)])
    for state in states:
        state.copy_(torch.randn(state.shape, generator=generator).to(state))
    before = [s.clone() for s in states]
    targets = {1: 0, 5: 0, 9: 2}  # row -> shared slot: rows no range, slots span 3 values
    pool.restore_shared([SsmPrefixRestore(seq, k, 10 + k, 20 + k) for seq, k in targets.items()])
    dim = case.batch_dim
    for state, old, snap in zip(states, before, kept, strict=True):
        for seq in range(16):
            row = state.select(case.batch_dim, seq)
            k = targets.get(seq)
            expected = old.select(case.batch_dim, seq) if k is None else snap.select(dim, k)
            assert torch.equal(as_bits(row.contiguous()), as_bits(expected.contiguous())), seq


@pytest.mark.parametrize("index_ops", [False, True])
def test_shared_copies_are_one_batched_copy_per_tensor_at_any_batch_size(index_ops: bool) -> None:
    case = Case("cpu", torch.float32, 1, index_ops=index_ops)
    pool = make_pool(case, make_states(case, 1_024), 2, shared_slots=1_024)
    tensors = len(pool.live_states)
    torch.manual_seed(0)
    half = torch.randperm(1_024)[:512].tolist()
    slots = torch.randperm(1_024)[:512].tolist()
    tickets = iter(range(1, 10_000))

    def saves(rows: list[int]) -> list[SsmPrefixSave]:
        return [SsmPrefixSave(seq, slots[k], 3, next(tickets)) for k, seq in enumerate(rows)]

    pool.save_shared(saves(half))  # warm: the row views, the scratch
    counted = []
    for rows in (half[:2], half):
        batch = saves(rows)
        reads = [SsmPrefixRestore(s.seq, s.slot, 3, s.ticket) for s in batch]
        counted.append(count_ops(partial(pool.save_shared, batch)))
        counted.append(count_ops(partial(pool.restore_shared, reads)))
    # Many rows from one slot, and one row: the same ops.
    one = saves(half[:1])
    pool.save_shared(one)
    fan = [SsmPrefixRestore(seq, one[0].slot, 3, one[0].ticket) for seq in half]
    counted.append(count_ops(lambda: pool.restore_shared(fan)))
    for ops in counted:
        assert copies(ops) == (2 if index_ops else 1) * tensors, ops
        assert not [op for op in ops if "empty" in op or "item" in op]  # nothing allocated, no sync


def test_shared_slots_cost_what_a_ring_slot_of_one_row_costs() -> None:
    states = make_states(Case("cpu", torch.bfloat16, 1), 8)
    row_bytes = sum(s.numel() * s.element_size() for s in states) // 8
    assert TorchSnapshotPool.bytes_needed(states, 2, batch_dim=1, shared_slots=5) == 21 * row_bytes
    pool = TorchSnapshotPool(states, 2, batch_dim=1, shared_slots=5)
    assert pool.nbytes == 21 * row_bytes
    assert pool.shared_slots == 5
    assert repr(pool).endswith("shared_slots=5)")
    with pytest.raises(InvalidArgumentError, match="'shared_slots'"):
        TorchSnapshotPool(states, 2, batch_dim=1, shared_slots=-1)
    zero_rows = [torch.zeros(0, 4)]
    assert TorchSnapshotPool.bytes_needed(zero_rows, 3, shared_slots=2) == 2 * 4 * 4


def test_a_moved_live_tensor_refuses_shared_copies() -> None:
    state = torch.zeros(4, 3)
    pool = TorchSnapshotPool([state], 1, shared_slots=2)
    pool.save_shared([SsmPrefixSave(0, 0, 1, 1)])
    other = torch.zeros(4, 3)
    state.set_(other.untyped_storage(), 0, other.shape, other.stride())
    with pytest.raises(InvalidArgumentError, match="'live_states\\[0\\]' must still be"):
        pool.restore_shared([SsmPrefixRestore(1, 0, 1, 1)])
    with pytest.raises(InvalidArgumentError, match="'live_states\\[0\\]' must still be"):
        pool.save_shared([SsmPrefixSave(1, 1, 1, 2)])
    assert pool.stored_shared_ticket(1) is None


def test_an_accept_into_memory_the_pool_no_longer_owns_is_refused() -> None:
    live = torch.zeros(2, 3)
    staged = torch.arange(2 * 2 * 3, dtype=torch.float32).reshape(2, 2, 3)
    pool = TorchSnapshotPool([live], 1, intermediate_states=[staged])
    _repoint_data(live)
    with pytest.raises(InvalidArgumentError, match=r"'live_states\[0\]' must still be the memory"):
        pool.accept([SsmStateAccept(0, 1)])
    assert torch.equal(live, torch.zeros(2, 3))


def test_empty_batches_copy_nothing_and_raise_nothing() -> None:
    pool = TorchSnapshotPool([torch.ones(2, 3)], 1, intermediate_states=[torch.ones(2, 2, 3)])
    pool.restore([])
    pool.accept([])
    assert pool.save([]).ok
    assert torch.equal(pool.live_states[0], torch.ones(2, 3))
