"""``SsmPrefixConnector``: vLLM's KV connector API over the prefix index and the slot store.

The scheduler side (in vLLM's engine core) owns the ``PrefixSnapshotIndex``
and decides every copy; the worker side owns the slots' bytes and performs
the copies named in each step's metadata, so the two agree on slot numbers
and tickets even when they run in different processes. Supported: one
worker (no tensor or pipeline parallelism), prefix caching off (vLLM's
Mamba cache mode ``"none"``), KV cache groups of full attention and Mamba
only; anything else is refused when the engine starts.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, ClassVar, Final

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    SupportsHMA,
)
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    MambaSpec,
)

from ..._errors import InvalidArgumentError
from ...prefix import PrefixSnapshotIndex
from ._ops import StepOps
from ._options import check_engine, options_of, prefix_slots
from ._scheduler import PrefixBook, RequestOptions
from ._store import SlotStore

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["SsmPrefixConnector", "SsmPrefixMetadata"]

_LOG: Final = logging.getLogger(__name__)


class SsmPrefixMetadata(KVConnectorMetadata):
    """One step's copies, handed from the scheduler side to the worker side."""

    def __init__(self, ops: StepOps) -> None:
        self.ops = ops


class SsmPrefixConnector(KVConnectorBase_V1, SupportsHMA):
    """Prefix snapshots (attention KV + SSM state) shared across vLLM requests (SPEC 16)."""

    #: Load the SSM state with the attention KV; only a test turns it off, to see it matter.
    LOADS_SSM_STATE: ClassVar[bool] = True

    def __init__(self, vllm_config: object, role: object, kv_cache_config: object) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self._groups = check_engine(vllm_config, kv_cache_config, (FullAttentionSpec, MambaSpec))
        self._num_blocks = int(kv_cache_config.num_blocks)  # type: ignore[attr-defined]
        extra = vllm_config.kv_transfer_config.kv_connector_extra_config  # type: ignore[attr-defined]
        self._book: PrefixBook | None = None
        self._store: SlotStore | None = None
        self._sent: set[str] = set()
        self._loaded: set[str] = set()
        self._failed: set[str] = set()
        if role == KVConnectorRole.SCHEDULER:
            self._book = PrefixBook(PrefixSnapshotIndex(prefix_slots(extra)))

    @property
    def index(self) -> PrefixSnapshotIndex:
        """The scheduler side's index (its ``stats`` count hits and publishes)."""
        if self._book is None:
            raise RuntimeError("the prefix index lives on the scheduler side only")
        return self._book.index

    @property
    def store(self) -> SlotStore:
        """The worker side's slots."""
        if self._store is None:
            raise RuntimeError("the slots live on the worker side, once KV caches are registered")
        return self._store

    # -- scheduler side ----------------------------------------------------------------

    def get_num_new_matched_tokens(
        self, request: object, num_computed_tokens: int
    ) -> tuple[int, bool]:
        assert self._book is not None
        if num_computed_tokens:
            return 0, False
        tokens = list(request.prompt_token_ids or ())  # type: ignore[attr-defined]
        # Shared only where the state is the base model's over these ids: not a LoRA adapter's,
        # not a salted tenant's, and not one fed embeddings (prompt_embeds: its ids are vLLM's
        # placeholders, so its state would be published under ids it never saw).
        shared = (
            bool(tokens)
            and getattr(request, "lora_request", None) is None
            and not getattr(request, "cache_salt", None)
            and getattr(request, "prompt_embeds", None) is None
        )
        try:
            options = options_of(request.kv_transfer_params, shared=shared)  # type: ignore[attr-defined]
        except InvalidArgumentError as error:
            _LOG.warning(
                "request %s is served without shared prefixes: %s",
                request.request_id,  # type: ignore[attr-defined]
                error,
            )
            options = RequestOptions(load=False, publish=False)
        hit = self._book.match(request.request_id, tokens, options)  # type: ignore[attr-defined]
        return hit, hit > 0  # loaded "asynchronously": a stale slot then recomputes

    def update_state_after_alloc(
        self, request: object, blocks: object, num_external_tokens: int
    ) -> None:
        assert self._book is not None
        ids = blocks.get_block_ids()  # type: ignore[attr-defined]
        self._book.allocated(request.request_id, ids, num_external_tokens)  # type: ignore[attr-defined]

    def get_loaded_kv_cache_group_ids(self, request: object) -> tuple[int, ...]:
        return tuple(range(len(self._groups)))

    def build_connector_meta(self, scheduler_output: object) -> SsmPrefixMetadata:
        assert self._book is not None
        out = scheduler_output
        counts: dict[str, int] = out.num_scheduled_tokens  # type: ignore[attr-defined]
        for new in out.scheduled_new_reqs:  # type: ignore[attr-defined]
            self._book.scheduled(
                new.req_id,
                new.block_ids,
                new.num_computed_tokens,
                counts.get(new.req_id, 0),
                replace=True,
            )
        cached = out.scheduled_cached_reqs  # type: ignore[attr-defined]
        for i, req_id in enumerate(cached.req_ids):
            self._book.scheduled(
                req_id,
                cached.new_block_ids[i],
                cached.num_computed_tokens[i],
                counts.get(req_id, 0),
                replace=req_id in cached.resumed_req_ids,
            )
        return SsmPrefixMetadata(self._book.take_step())

    def update_connector_output(self, connector_output: object) -> None:
        assert self._book is not None
        failed = set(getattr(connector_output, "failed_recving", None) or ())
        for req_id in getattr(connector_output, "finished_recving", None) or ():
            self._book.load_done(req_id, failed=req_id in failed)

    def request_finished(self, request: object, block_ids: list[int]) -> tuple[bool, None]:
        return self.request_finished_all_groups(request, (block_ids,))

    def request_finished_all_groups(
        self, request: object, block_ids: tuple[list[int], ...]
    ) -> tuple[bool, None]:
        assert self._book is not None
        stopped = bool(request.is_finished()) and request.status.name in (  # type: ignore[attr-defined]
            "FINISHED_STOPPED",
            "FINISHED_LENGTH_CAPPED",
        )
        if not stopped:
            self._book.finished(request.request_id, (), 0, block_ids)  # type: ignore[attr-defined]
            return False, None
        tokens: Sequence[int] = list(request.all_token_ids)  # type: ignore[attr-defined]
        computed = int(request.num_computed_tokens)  # type: ignore[attr-defined]
        keep = self._book.finished(request.request_id, tokens, computed, block_ids)  # type: ignore[attr-defined]
        return keep, None

    # -- worker side -------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self._store = SlotStore(self._groups, dict(kv_caches), self._num_blocks)
        self._store.copy_ssm = self.LOADS_SSM_STATE

    def start_load_kv(self, forward_context: object, **kwargs: object) -> None:
        ops = self._ops()
        for copy in ops.finished_saves:
            self.store.save(copy)
            self._sent.add(copy.req_id)
        for copy in ops.loads:
            (self._loaded if self.store.load(copy) else self._failed).add(copy.req_id)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None

    def save_kv_layer(
        self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: object, **kwargs: object
    ) -> None:
        return None

    def wait_for_save(self) -> None:
        for copy in self._ops().prompt_saves:
            self.store.save(copy)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        sent, self._sent = self._sent, set()
        loaded, self._loaded = self._loaded, set()
        return (sent or None), (loaded or None)

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        results = super().get_transfer_results(finished_req_ids)
        failed, self._failed = self._failed, set()
        results.finished_recving |= failed  # a failed load is finished too, and reported so
        results.failed_recving |= failed
        return results

    def _ops(self) -> StepOps:
        if not self.has_connector_metadata():
            return StepOps()
        meta = self._get_connector_metadata()
        return meta.ops if isinstance(meta, SsmPrefixMetadata) else StepOps()
