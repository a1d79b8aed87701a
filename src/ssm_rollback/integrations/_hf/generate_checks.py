"""The checks of what a decoder is handed besides its own keywords: modes, stops, outputs,
processors, stopping criteria, caches and token ids the settings name (``generate_args``).

Each refuses by name what the decoders cannot honour, before anything decodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import GenerationConfig, SynthIDTextWatermarkingConfig
from transformers.cache_utils import Cache
from transformers.generation.configuration_utils import GenerationMode
from transformers.generation.logits_process import (
    LogitsProcessorList,
    SynthIDTextWatermarkLogitsProcessor,
    UnbatchedClassifierFreeGuidanceLogitsProcessor,
)
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError
from .arguments import shown

__all__ = [
    "check_criteria",
    "check_empty_cache",
    "check_modes",
    "check_token_settings",
    "given_processors",
    "no_guidance",
]

#: Settings ``generate`` makes stopping criteria of, which the decoders do not have.
_STOPS = ("max_time", "stop_strings")

#: Why SynthID's watermark is refused (KGW's, ``WatermarkingConfig``, keeps no state: taken).
_SYNTHID = (
    "its processor keeps a state that each call advances (the contexts it has seen), which "
    "the decoders' verify positions, drafts, rollbacks and rows decoded one after another "
    "would advance unlike generate's one call per token"
)

#: Settings that ask for outputs a ``GenerationResult`` does not have (it has ``scores`` and
#: ``logits``; ``return_dict_in_generate`` is what it always is).
_OUTPUTS = ("output_attentions", "output_hidden_states")


def check_modes(value: GenerationConfig) -> None:
    """Refuse a config asking for a mode, a stop, prompt healing, an output, no cache or a
    watermark keeping state the decoders do not have."""
    mode = value.get_generation_mode()
    if mode not in (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE):
        raise InvalidArgumentError(
            f"'generation_config' must ask for greedy decoding or sampling (num_beams=1, no "
            f"assistant_model or prompt lookup, no DoLa or contrastive search), got {mode.value}"
        )
    if value.num_return_sequences not in (None, 1):
        raise InvalidArgumentError(
            f"'generation_config.num_return_sequences' must be 1, got {value.num_return_sequences}"
        )
    for name in _STOPS:
        if getattr(value, name, None) is not None:
            raise InvalidArgumentError(
                f"'generation_config.{name}' must be None: the decoders stop only at "
                f"max_new_tokens and the EOS ids, got {shown(getattr(value, name))}"
            )
    if value.token_healing:
        raise InvalidArgumentError(
            "'generation_config.token_healing' must be False: the decoders decode the prompt "
            "as given, got True"
        )
    for name in _OUTPUTS:
        if getattr(value, name, None):
            raise InvalidArgumentError(
                f"'generation_config.{name}' must be False: the decoders return sequences, "
                f"scores, logits and a report (a GenerationResult), got True"
            )
    if isinstance(value.watermarking_config, SynthIDTextWatermarkingConfig):
        raise InvalidArgumentError(
            f"'generation_config.watermarking_config' must not be SynthID's: {_SYNTHID}, got "
            f"a SynthIDTextWatermarkingConfig"
        )


def given_processors(value: object) -> LogitsProcessorList:
    """``logits_processor``: a list of callables (no classifier-free guidance), or none."""
    if value is None:
        return LogitsProcessorList()
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise InvalidArgumentTypeError(
            f"'logits_processor' must be a list of logits processors, got {shown(value)}"
        )
    odd = [type(p).__name__ for p in value if not callable(p)]
    if odd:
        raise InvalidArgumentTypeError(
            f"'logits_processor' must hold logits processors (callables of input_ids and "
            f"scores), got {', '.join(odd)}"
        )
    no_guidance(value)
    if any(isinstance(p, SynthIDTextWatermarkLogitsProcessor) for p in value):
        raise InvalidArgumentError(
            f"'logits_processor' must not hold SynthID's watermark: {_SYNTHID}, got a "
            f"SynthIDTextWatermarkLogitsProcessor"
        )
    return LogitsProcessorList(value)


def no_guidance(processors: Sequence[object]) -> None:
    """Classifier-free guidance runs the model on a cache of its own, one token per call: it
    cannot follow verify positions or rollbacks."""
    if any(isinstance(p, UnbatchedClassifierFreeGuidanceLogitsProcessor) for p in processors):
        raise InvalidArgumentError(
            "'guidance_scale' must be None or 1: classifier-free guidance decodes its own "
            "cache one token at a time, which the decoders' rollbacks cannot follow, got "
            "UnbatchedClassifierFreeGuidanceLogitsProcessor"
        )


def check_criteria(value: object, config: GenerationConfig, prepared: bool) -> None:
    """Only the length and EOS criteria ``generate`` derives from the config (``prepared``: it
    did): the decoders apply ``max_new_tokens`` and ``eos_token_id`` themselves. One of those
    types with other values is the caller's own, which ``generate`` puts in place of its own;
    a direct call has none to derive, and passes ``max_new_tokens`` and ``eos_token_id``."""
    if value is None:
        return
    if not isinstance(value, Sequence):
        raise InvalidArgumentTypeError(
            f"'stopping_criteria' must be a list of stopping criteria, got {shown(value)}"
        )
    other = [type(c).__name__ for c in value if not (prepared and _derived(c, config))]
    if other:
        raise InvalidArgumentError(
            f"'stopping_criteria' may hold only the length and EOS criteria model.generate "
            f"derives from its generation_config, got {', '.join(other)} (from max_time, "
            f"stop_strings or criteria of your own: pass max_new_tokens or eos_token_id instead)"
        )


def _derived(criterion: object, config: GenerationConfig) -> bool:
    """Whether ``criterion`` is one ``generate`` derives from ``config``, with its values."""
    if isinstance(criterion, MaxLengthCriteria):
        return bool(criterion.max_length == config.max_length)
    if isinstance(criterion, EosTokenCriteria):
        configured = config.eos_token_id
        ids = [configured] if isinstance(configured, int) else list(configured or ())
        return set(criterion.eos_token_id.reshape(-1).tolist()) == set(ids)
    return False


def check_empty_cache(name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, Cache):
        raise InvalidArgumentTypeError(
            f"'{name}' must be an empty transformers Cache or None, got {shown(value)}"
        )
    held = value.get_seq_length()
    if held:
        raise InvalidArgumentError(
            f"'{name}' must be empty: the decoders prefill a cache of their own from input_ids "
            f"(pass the whole prompt), got a {type(value).__name__} holding {held} tokens"
        )


#: The settings whose ids ``generate``'s processors index scores by: one past the vocabulary
#: fails in their first call (after the prompt is prefilled and streamed), with their own error.
#: (``suppress_tokens`` looks its ids up instead: one past the vocabulary suppresses nothing.)
_TOKEN_SETTINGS = ("bad_words_ids", "sequence_bias", "forced_bos_token_id", "forced_eos_token_id")


def check_token_settings(config: GenerationConfig, vocab: int) -> None:
    """Refuse a token id outside ``[0, vocab)`` in a setting that names ids, by name."""
    for name in _TOKEN_SETTINGS:
        value = getattr(config, name, None)
        for token in _ids_in(list(value) if isinstance(value, dict) else value):  # bias keys
            if not 0 <= token < vocab:
                raise InvalidArgumentError(
                    f"'generation_config.{name}' must name token ids in [0, {vocab}), got "
                    f"{shown(token)}"
                )


def _ids_in(value: object) -> list[int]:
    """The ints in ``value`` and its nested lists and tuples (a sequence bias's ``[ids, bias]``
    pairs give their ids); other leaves are the processors' own to refuse."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list | tuple):
        items = list(value)
        if len(items) == 2 and isinstance(items[1], float):  # a sequence bias's [ids, bias]
            items = items[:1]
        return [token for item in items for token in _ids_in(item)]
    return []
