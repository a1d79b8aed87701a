"""The logits processors ``generate`` builds, built for a direct call to a decoder.

``GenerateArgs.scoring`` builds them (``generate``'s step 8) from the
config prepared for the call, with the call's EOS ids and whole length;
through ``model.generate`` the decoders take those ``generate`` built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.utils import GenerationMixin

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError
from .generate_checks import no_guidance

if TYPE_CHECKING:
    from transformers._typing import GenerativePreTrainedModel

__all__ = ["build_processors", "generative_model"]


def generative_model(model: torch.nn.Module) -> GenerativePreTrainedModel:
    if not isinstance(model, GenerationMixin):
        raise InvalidArgumentTypeError(
            f"'model' must be a transformers generation model (a GenerationMixin), "
            f"got {type(model).__name__}"
        )
    return cast("GenerativePreTrainedModel", model)  # a PreTrainedModel with GenerationMixin


def build_processors(
    model: torch.nn.Module,
    config: GenerationConfig,
    ids: torch.Tensor,
    mask: torch.Tensor,
    given: LogitsProcessorList,
) -> LogitsProcessorList:
    """The processors ``generate`` builds for ``config``, a prompt ``ids`` and its attention
    ``mask`` (its step 8: a repetition penalty ignores each row's left padding)."""
    generative = generative_model(model)
    try:
        GenerationMixin._prepare_special_tokens(
            generative, config, True, device=ids.device, batch_size=len(ids)
        )
        built: LogitsProcessorList = GenerationMixin._get_logits_processor(
            generative,
            generation_config=config,
            input_ids_seq_length=ids.shape[-1],
            encoder_input_ids=ids,  # type: ignore[arg-type]  # a LongTensor: read_prompts'
            logits_processor=given,
            device=str(ids.device),
            model_kwargs={"attention_mask": mask.to(ids.device)},
        )
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(f"generation settings must be valid: {error}") from None
    no_guidance(built)
    return built
