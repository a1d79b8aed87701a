"""Run the chat workload on vLLM in this process and print what it gave as JSON.

``python workload.py MODEL_DIR MODE`` with MODE one of ``none`` (no connector),
``connector``, ``no-ssm`` (the connector with its SSM state copy broken),
``stale`` (every slot evicted or re-published between match and load) or
``refuse`` (prefix caching on: the connector must refuse the engine). A
fresh process per engine keeps vLLM's process-wide state out of the way.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Iterator

import attrs

from ssm_rollback.integrations.vllm import SsmPrefixConnector

PREFIX_SLOTS = 32
SYSTEM_LENGTH = 120
MAX_TOKENS = 8


class NoSsmConnector(SsmPrefixConnector):
    """Loads the attention KV of a hit but leaves the SSM state as vLLM initialised it."""

    LOADS_SSM_STATE = False


class StaleConnector(SsmPrefixConnector):
    """Every load finds its slot evicted (even loads) or re-published (odd loads)."""

    def start_load_kv(self, forward_context: object, **kwargs: object) -> None:
        for number, copy in enumerate(self._ops().loads):
            if number % 2:
                self.store.save(attrs.evolve(copy, ticket=copy.ticket + 10**9))
            else:
                self.store.forget(copy.slot)
        super().start_load_kv(forward_context, **kwargs)


def _words(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(2, 250) for _ in range(n)]


def requests_of(
    rng: random.Random, system: list[int], outputs: dict[str, list[int]]
) -> Iterator[tuple[str, list[int], int]]:
    """Yield ``(name, prompt, max_tokens)``; later prompts extend earlier ``outputs``."""
    yield "system", system, 1  # the application shares its system prompt: a prompt end
    users = {(c, t): _words(rng, 10 + 3 * c + t) for c in range(4) for t in range(1, 4)}
    edit = _words(rng, 9)
    prompts: dict[str, list[int]] = {}
    for turn in (1, 2, 3):
        for c in range(4):
            if turn == 1:
                prompt = system + users[c, 1]
            elif turn == 3 and c == 3:  # an edit of the second user message
                prompt = prompts[f"c{c}t1"] + outputs[f"c{c}t1"] + edit
            else:
                before = f"c{c}t{turn - 1}"
                prompt = prompts[before] + outputs[before] + users[c, turn]
            prompts[f"c{c}t{turn}"] = prompt
            yield f"c{c}t{turn}", prompt, MAX_TOKENS


def _embeds(llm: object, model: str, params: type) -> list[dict[str, object]]:
    """A request fed ``prompt_embeds`` (vLLM holds placeholder ids 0 for it) that may only
    publish, one of those placeholder ids and more, the embeds again with loading on, then the
    ids: none may load or publish a shared prefix."""
    from safetensors.torch import load_file

    weights = load_file(os.path.join(model, "model.safetensors"))
    embedding = next(value for key, value in weights.items() if "embed" in key)
    ids = _words(random.Random(7), 58)
    quiet = {"kv_transfer_params": {"ssm_rollback": {"load": False}}}  # a publish only
    results: list[dict[str, object]] = []
    first: list[int] = []
    for name, prompt, extra in (
        ("embeds", {"prompt_embeds": embedding[ids].clone()}, quiet),
        ("placeholders", None, {}),
        ("embeds, loading", {"prompt_embeds": embedding[ids].clone()}, {}),
        ("ids", {"prompt_token_ids": ids}, {}),
    ):
        if prompt is None:  # the ids vLLM holds for the embeds request and its output, and one more
            prompt = {"prompt_token_ids": [0] * len(ids) + first[:-1] + [5]}
        sampling = params(temperature=0.0, max_tokens=MAX_TOKENS, extra_args=extra)
        done = llm.generate([prompt], sampling, use_tqdm=False)[0]  # type: ignore[attr-defined]
        tokens = list(done.outputs[0].token_ids)
        first = first or tokens
        results.append({"name": name, "tokens": tokens, "cached": done.num_cached_tokens or 0})
    return results


def main(model: str, mode: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm.config import KVTransferConfig

    from vllm import LLM, SamplingParams

    classes = {"connector": "SsmPrefixConnector", "no-ssm": "NoSsmConnector"}
    classes |= {"embeds-connector": "SsmPrefixConnector"}
    classes |= {"stale": "StaleConnector", "refuse": "SsmPrefixConnector"}
    kwargs: dict[str, object] = {}
    if mode in classes:
        kwargs["kv_transfer_config"] = KVTransferConfig(
            kv_connector=classes[mode],
            kv_connector_module_path="ssm_rollback.integrations.vllm"
            if classes[mode] == "SsmPrefixConnector"
            else "workload",
            kv_role="kv_both",
            kv_load_failure_policy="recompute",
            kv_connector_extra_config={"prefix_slots": PREFIX_SLOTS},
        )
    engine = dict(
        model=model,
        enforce_eager=True,
        max_model_len=1024,
        dtype="float32",
        enable_prefix_caching=mode == "refuse",
        gpu_memory_utilization=0.05,
        kv_cache_memory_bytes=64 << 20,
        **kwargs,
    )
    if mode.startswith("embeds"):
        engine["enable_prompt_embeds"] = True
        print("RESULT " + json.dumps(_embeds(LLM(**engine), model, SamplingParams)))
        return
    if mode == "refuse":
        try:
            LLM(**engine)
        except Exception as error:  # report the named error wherever vLLM wrapped it
            seen: BaseException | None = error
            while seen is not None and type(seen).__name__ != "UnsupportedEngineError":
                seen = seen.__cause__ or seen.__context__
            found = error if seen is None else seen
            print(json.dumps({"refused": type(found).__name__, "message": str(found)}))
            return
        print(json.dumps({"refused": None, "message": ""}))
        return
    llm = LLM(**engine)
    rng = random.Random(26)
    system = _words(rng, SYSTEM_LENGTH)
    outputs: dict[str, list[int]] = {}
    results = []
    for name, prompt, max_tokens in requests_of(rng, system, outputs):
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=0)
        done = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)[0]
        tokens = list(done.outputs[0].token_ids)
        logprobs = [
            step[token].logprob
            for step, token in zip(done.outputs[0].logprobs or [], tokens, strict=True)
        ]
        outputs[name] = tokens
        results.append(
            {
                "name": name,
                "prompt": prompt,
                "tokens": tokens,
                "logprobs": logprobs,
                "cached": done.num_cached_tokens or 0,
            }
        )
    print("RESULT " + json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
