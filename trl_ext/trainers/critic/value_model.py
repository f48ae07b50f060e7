"""Critic PPO's value model: a checkpoint loaded as a token classifier with one output (its backbone and a new scalar
head), checked against the policy's vocabulary. The synchronous critic trainer and the asynchronous one both build
theirs here (the asynchronous one with TRL's tree attention, to score its packed rows)."""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig, AutoModelForTokenClassification, PreTrainedModel

from .new_head import from_pretrained_with_new_head


def load_value_model(owner: str, source: str, init: dict[str, Any]) -> PreTrainedModel:
    """The value model from `source` (a path or Hub id; default the policy's checkpoint, whose LM head it drops),
    loaded with `from_pretrained`'s keyword arguments `init` (`trust_remote_code` among them).

    Raises:
        ValueError: `source` cannot be built as a one-output token classifier, naming it and the reason.
    """
    try:
        config = AutoConfig.from_pretrained(
            source, num_labels=1, trust_remote_code=init.get("trust_remote_code", False)
        )
        config.classifier_dropout = 0.0  # values, not a classifier: no dropout on the head
        # the policy's checkpoint under a new scalar head: transformers' load report only if more differs
        return from_pretrained_with_new_head(AutoModelForTokenClassification, source, config=config, **init)
    except (ValueError, KeyError, AttributeError) as error:
        raise ValueError(
            f"{owner}: cannot build a value model from {source!r} (a token classifier with one output: its "
            f"backbone and a scalar head over its hidden size): {error}"
        ) from error


def check_value_vocabulary(owner: str, value_model: Any, policy: Any) -> None:
    """The critic reads the policy's token ids: a value model with another vocabulary size is a ValueError."""
    vocabulary = getattr(value_model.config, "vocab_size", None)
    policy_vocabulary = policy.config.get_text_config().vocab_size
    if vocabulary is not None and vocabulary != policy_vocabulary:
        raise ValueError(
            f"{owner}: the value model's vocabulary has {vocabulary} tokens but the policy's {policy_vocabulary}; "
            "the critic reads the policy's token ids, so it needs the policy's tokenizer"
        )


__all__ = ["check_value_vocabulary", "load_value_model"]
