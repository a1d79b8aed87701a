"""``ssm_rollback.testing.tiny_model``: a tiny causal LM, the same weights for the same seed."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch

from ssm_rollback.testing import tiny_config, tiny_model


def weights(m: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach() for p in m.parameters()]


def test_the_same_seed_gives_the_same_weights_and_another_seed_others() -> None:
    first, again, other = tiny_model("mamba2"), tiny_model("mamba2"), tiny_model("mamba2", seed=1)
    assert all(map(torch.equal, weights(first), weights(again)))
    assert not all(map(torch.equal, weights(first), weights(other)))


def test_it_is_the_model_of_tiny_config_in_eval_mode() -> None:
    m = tiny_model("nemotron_h", vocab_size=96)
    assert not m.training
    assert m.config.to_dict() == tiny_config("nemotron_h", vocab_size=96).to_dict()  # type: ignore[union-attr,operator]
    assert m.get_output_embeddings().out_features == 96  # type: ignore[operator]


def test_the_callers_random_state_is_left_as_it_was() -> None:
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    tiny_model("mamba2", seed=7)
    assert torch.equal(torch.rand(4), expected)
