"""An int too large to print is refused by name, never with the ``ValueError`` of printing it.

Python refuses to turn an int of more than 4,300 digits into text, so an error
message that formatted such an argument with ``{value}`` raised a foreign
``ValueError`` ("Exceeds the limit ... for integer string conversion") in
place of the library's refusal. Every message quoting a given int goes through
``_errors.shown`` (or ``grouped``). Each case below raised that ``ValueError``
before; the table walks every public call that takes an int, with the int far
past the limit on both sides, and wants an ``SsmRollbackError`` naming the
argument.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

import ssm_rollback
import ssm_rollback.prefix as placement
from ssm_rollback import (
    PrefixSnapshotIndex,
    SlotTags,
    SsmDecodeRing,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmRollbackError,
    apply_effects,
    commit_verified,
    commit_verified_batch,
    plan_rollback,
    snapshot_boundaries,
)
from ssm_rollback._errors import grouped, shown
from ssm_rollback.backends.fake import FakeSnapshotPool
from ssm_rollback.reserve import (
    SHIPPED_MODELS,
    decode_rollback_ring_slots,
    shipped_config,
    state_spec_from_hf_config,
)

HUGE = 10**5000  # 16,610 bits: past str()'s 4,300-digit limit
SIGNS = pytest.mark.parametrize("value", [HUGE, -HUGE], ids=["huge", "huge-negative"])


def _ring() -> SsmDecodeRing:
    ring = SsmDecodeRing(4)
    ring.record(3)
    ring.record(7)
    return ring


def _verify(**given: object) -> object:
    fields: dict[str, object] = {"seq": 0, "first_position": 8, "accepted": 1}
    fields |= given
    flags = {"is_boundary": [True, False], "in_thinking": [False, False]}
    return commit_verified(_ring(), **fields, **flags)  # type: ignore[arg-type]


def _verify_batch(**given: object) -> object:
    columns: dict[str, object] = {"first_positions": [8], "accepted": [1]}
    columns |= given
    flags = {"is_boundary": [[True, False]], "in_thinking": [[False, False]]}
    return commit_verified_batch([_ring()], **columns, **flags)  # type: ignore[arg-type]


def _shared(effect: type[SsmPrefixSave | SsmPrefixRestore], **given: int) -> object:
    fields = {"seq": 0, "slot": 0, "length": 1, "ticket": 1} | given
    pool = FakeSnapshotPool(2, 2, shared_slots=2)
    return apply_effects(pool, [effect(**fields)], [SsmDecodeRing(2), SsmDecodeRing(2)])


def _depth(**given: object) -> object:
    spec = state_spec_from_hf_config(shipped_config(SHIPPED_MODELS[0]))
    arguments: dict[str, object] = {"max_sequences": 4, "free_bytes": 10**9} | given
    return decode_rollback_ring_slots(spec, **arguments)  # type: ignore[arg-type]


CALLS: dict[str, tuple[Callable[[int], object], str]] = {
    "plan_rollback boundaries": (
        lambda v: plan_rollback(_ring(), [3, abs(v)], seq=0, current_len=9),
        "'boundaries'",
    ),
    "snapshot_boundaries rows": (
        lambda v: snapshot_boundaries(
            [_ring()], positions=[9], is_boundary=[True], in_thinking=[False], rows=[abs(v)]
        ),
        "row",
    ),
    "commit_verified seq": (lambda v: _verify(seq=-abs(v)), "'seq'"),
    "commit_verified first_position": (
        lambda v: _verify(first_position=-abs(v)),
        "'first_position'",
    ),
    "commit_verified accepted": (lambda v: _verify(accepted=v), "'accepted'"),
    "commit_verified_batch first_positions": (
        lambda v: _verify_batch(first_positions=[-abs(v)]),
        "first_position",
    ),
    "commit_verified_batch accepted": (lambda v: _verify_batch(accepted=[v]), "accepted"),
    "commit_verified_batch rows": (lambda v: _verify_batch(rows=[v]), "row"),
    "SlotTags num_sequences": (lambda v: SlotTags(v, 2), "'num_sequences'"),
    "SlotTags slots_per_sequence": (lambda v: SlotTags(2, v), "'slots_per_sequence'"),
    "SlotTags shared_slots": (lambda v: SlotTags(2, 2, shared_slots=v), "'shared_slots'"),
    "SlotTags.commit flat": (lambda v: SlotTags(2, 2).commit([abs(v)], [0], [1]), "'flat"),
    "SlotTags.forget flat": (lambda v: SlotTags(2, 2).forget([abs(v)]), "'flat"),
    "FakeSnapshotPool num_sequences": (lambda v: FakeSnapshotPool(v, 2), "'num_sequences'"),
    "FakeSnapshotPool shared_slots": (
        lambda v: FakeSnapshotPool(2, 2, shared_slots=v),
        "'shared_slots'",
    ),
    "a shared save's slot": (lambda v: _shared(SsmPrefixSave, slot=abs(v)), r"\.slot'"),
    "a shared restore's slot": (lambda v: _shared(SsmPrefixRestore, slot=abs(v)), r"\.slot'"),
    "a shared restore's length": (
        lambda v: _shared(SsmPrefixRestore, length=abs(v)),
        "not ticket 1 length an int of 16,610 bits",
    ),
    "a shared restore's ticket": (
        lambda v: _shared(SsmPrefixRestore, ticket=abs(v)),
        "not ticket an int of 16,610 bits",
    ),
    "PrefixSnapshotIndex capacity": (lambda v: PrefixSnapshotIndex(v), "'capacity'"),
    "PrefixSnapshotIndex.publish length": (
        lambda v: PrefixSnapshotIndex(4).publish(0, [1, 2, 3], v),
        "'length'",
    ),
    "PrefixSnapshotIndex.plan_prefill publish_at": (
        lambda v: PrefixSnapshotIndex(4).plan_prefill(0, [1, 2, 3], publish_at=[v]),
        "publish_at",
    ),
    "prefix.app length": (lambda v: placement.app(v, message_ends=[1]), "'length'"),
    "prefix.app message_ends": (
        lambda v: placement.app(10, message_ends=[v]),
        "message_ends",
    ),
    "prefix.before_end length": (lambda v: placement.before_end(1, v), "'length'"),
    "prefix.every length": (lambda v: placement.every(2, v), "'length'"),
    "prefix.llamacpp start": (lambda v: placement.llamacpp(100, start=v), "'start'"),
    "prefix.sglang start": (lambda v: placement.sglang(100, start=v), "'start'"),
    "prefix.vllm_align start": (lambda v: placement.vllm_align(1000, start=v), "'start'"),
    "prefix.vllm_align block_size": (
        lambda v: placement.vllm_align(1000, block_size=v),
        "block_size|max_num_batched_tokens",
    ),
    "decode_rollback_ring_slots max_sequences": (
        lambda v: _depth(max_sequences=-abs(v)),
        "'max_sequences'",
    ),
    "decode_rollback_ring_slots override": (lambda v: _depth(override=v), "--ring-slots"),
    "decode_rollback_ring_slots prefix_slots": (
        lambda v: _depth(prefix_slots=v),
        "'prefix_slots'",
    ),
    "state_spec_from_hf_config tp_size": (
        lambda v: state_spec_from_hf_config(shipped_config(SHIPPED_MODELS[0]), tp_size=v),
        "'tp_size'",
    ),
}


@SIGNS
@pytest.mark.parametrize("case", sorted(CALLS))
def test_an_int_too_large_to_print_is_refused_by_name(case: str, value: int) -> None:
    call, names = CALLS[case]
    with pytest.raises(SsmRollbackError, match=names):
        call(value)


def test_shown_and_grouped_describe_an_int_too_large_to_print() -> None:
    assert shown(HUGE) == "an int of 16,610 bits"
    assert shown(-HUGE) == "a negative int of 16,610 bits"
    assert grouped(HUGE) == "an int of 16,610 bits"
    assert grouped(1 << 20) == "1,048,576"
    assert shown(1 << 20) == "1048576"


def test_shown_describes_a_value_whose_repr_raises() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert shown(Broken()) == "a Broken whose repr() raised RuntimeError"
    assert shown([HUGE]) == "a list whose repr() raised ValueError"


def test_no_refusal_formats_a_given_value_with_repr() -> None:
    """Every ``raise`` in the package quotes given values through ``shown``, never ``!r``
    (a module's ``__getattr__`` names an attribute, always a ``str``, the way Python does)."""
    package = Path(ssm_rollback.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Raise) and node.exc is not None:
                text = ast.get_source_segment(source, node) or ""
                if "!r}" in text and not text.startswith("raise AttributeError"):
                    found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert found == []


def _torch_calls() -> dict[str, tuple[Callable[[int], object], str]]:
    torch = pytest.importorskip("torch")
    from ssm_rollback.backends.torch import TorchSnapshotPool
    from ssm_rollback.distributed import shard_live_states, shard_of

    config: dict[str, object] = {
        "model_type": "nemotron_h",
        "num_hidden_layers": 2,
        "hybrid_override_pattern": "M*",
        "hidden_size": 64,
        "mamba_num_heads": 16,
        "mamba_head_dim": 4,
        "ssm_state_size": 4,
        "conv_kernel": 4,
        "torch_dtype": "float32",
    }

    def shard(**given: int) -> object:
        full = shard_live_states(config, num_sequences=2, tp_size=1)[0]
        where = {"rank": 0, "tp_size": 1, "dim": 1} | given
        return shard_of(full, config, tensor="conv", **where)

    def pool(*, batch_dim: int = 0, shared_slots: int = 0) -> TorchSnapshotPool:
        live = [torch.zeros(2, 3)]
        return TorchSnapshotPool(live, 2, batch_dim=batch_dim, shared_slots=shared_slots)

    return {
        "TorchSnapshotPool batch_dim": (lambda v: pool(batch_dim=abs(v)), "'batch_dim'"),
        "TorchSnapshotPool.stored_shared_ticket slot": (
            lambda v: pool(shared_slots=2).stored_shared_ticket(v),
            "'slot'",
        ),
        "shard_of rank": (lambda v: shard(rank=v), "'rank'"),
        "shard_of dim": (lambda v: shard(dim=v), "'dim'"),
        "shard_live_states num_sequences": (
            lambda v: shard_live_states(config, num_sequences=v, tp_size=1),
            "'num_sequences'",
        ),
    }


@SIGNS
@pytest.mark.parametrize(
    "case",
    [
        "TorchSnapshotPool batch_dim",
        "TorchSnapshotPool.stored_shared_ticket slot",
        "shard_of rank",
        "shard_of dim",
        "shard_live_states num_sequences",
    ],
)
def test_an_int_too_large_to_print_is_refused_by_name_on_torch(case: str, value: int) -> None:
    call, names = _torch_calls()[case]
    with pytest.raises(SsmRollbackError, match=names):
        call(value)
