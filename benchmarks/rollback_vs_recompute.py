"""A rollback (restore + crop) against recomputing the kept prefix, on a tiny transformers model.

    python benchmarks/rollback_vs_recompute.py            # prefixes 64 to 1,024
    python benchmarks/rollback_vs_recompute.py --smoke    # a quick pass that only checks it runs

For each prefix length L: prefill a prompt and L tokens, snapshot the SSM
state at L, decode a few tokens past it, then time, side by side in one run,
interleaved, medians of several rounds:

- rollback: ``apply_effects`` of the restore plus ``crop_attention`` to L;
- recompute: what an engine without snapshots does, one prefill of the prompt
  and the L kept tokens in a fresh cache.

The model is a tiny random one, so the absolute times are small; the ratio
grows with the prefix because a rollback's cost does not.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import torch
from transformers import AutoModelForCausalLM
from transformers.cache_utils import Cache
from transformers.utils import logging as hf_logging

from ssm_rollback import (
    RollbackPlan,
    SsmDecodeRing,
    apply_effects,
    rollback_to_boundary,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.integrations.transformers import HybridCacheSnapshotPool, crop_attention
from ssm_rollback.testing import tiny_config

PROMPT, PAST = 16, 8


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-type", default="nemotron_h")
    parser.add_argument("--lengths", default="64,128,256,512,1024")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    parser.add_argument("--smoke", action="store_true", help="tiny run, only checks it works")
    args = parser.parse_args(argv)
    lengths = [8] if args.smoke else [int(n) for n in args.lengths.split(",")]
    rounds = 1 if args.smoke else args.rounds
    warnings.simplefilter("ignore")
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]

    config = tiny_config(args.model_type, max_position_embeddings=4096)
    torch.manual_seed(0)
    model: torch.nn.Module = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    model.eval()
    vocab: int = config.vocab_size
    print(
        f"{args.model_type} (tiny, random), torch {torch.__version__}, CPU threads "
        f"{torch.get_num_threads()}"
    )
    print(f"{'prefix':>6} {'rollback ms':>12} {'recompute ms':>13} {'recompute/rollback':>19}")

    def forward(ids: torch.Tensor, cache: Cache | None) -> Cache:
        with torch.no_grad():
            kwargs = {} if cache is None else {"cache": cache}
            out = model(ids, use_cache=True, **kwargs)
        result: Cache = out.cache
        return result

    for length in lengths:
        ids = torch.randint(0, vocab, (1, PROMPT + length + PAST))
        cache = forward(ids[:, : PROMPT + length], None)
        pool = HybridCacheSnapshotPool(cache, 2)
        rings = [SsmDecodeRing(2)]
        save = snapshot_boundary_if_ssm(
            rings[0], seq=0, token_position=length, is_boundary=True, in_thinking=False
        )
        assert save is not None
        apply_effects(pool, [save], rings)
        rollback, recompute = [], []
        for _ in range(rounds):
            for n in range(PAST):  # move past the snapshot (untimed)
                forward(ids[:, PROMPT + length + n : PROMPT + length + n + 1], cache)
            plan = rollback_to_boundary(rings[0], [length], seq=0, current_len=length + PAST)
            assert isinstance(plan, RollbackPlan)
            started = time.perf_counter()
            apply_effects(pool, plan.effects, rings)
            crop_attention(cache, PROMPT + length)
            rollback.append(time.perf_counter() - started)
            started = time.perf_counter()
            forward(ids[:, : PROMPT + length], None)
            recompute.append(time.perf_counter() - started)
        a, b = statistics.median(rollback), statistics.median(recompute)
        print(f"{length:>6} {a * 1e3:>12.3f} {b * 1e3:>13.2f} {b / a:>18.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
