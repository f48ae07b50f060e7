"""Loading a checkpoint under a new task head, e.g. a causal LM's checkpoint as a token classifier (critic PPO's value
model: the policy's backbone with a new scalar head), without transformers' load report for what is intended.

transformers 5 logs a LOAD REPORT table (a warning of `transformers.modeling_utils`) whenever the checkpoint's
weights and the model's differ. Loading the policy's causal LM as a value model always differs the same way: the new
head (`score.*`) is MISSING, newly initialized as intended (the critic trains it), and the checkpoint's LM head
(`lm_head.*`) is UNEXPECTED (a token classifier has none). `from_pretrained_with_new_head` holds that report back
while it loads and logs it after all when the load differs in anything else: a backbone weight missing or
unexpected, a shape mismatch, or an error (whose message points at the report).
"""

from __future__ import annotations

import logging
from typing import Any

LOAD_REPORT = "LOAD REPORT"  # in the first line of transformers' report
_LOGGER = "transformers.modeling_utils"


def only_new_head(model, loading_info: dict[str, Any]) -> bool:
    """Whether a load's differences are a new head and the checkpoint's old one only: every missing and unexpected
    weight outside the backbone (`model.base_model_prefix`), nothing mismatched, no error."""
    prefix = f"{model.base_model_prefix}."
    keys = [*loading_info.get("missing_keys", ()), *loading_info.get("unexpected_keys", ())]
    clean = not loading_info.get("mismatched_keys") and not loading_info.get("error_msgs")
    return clean and not any(key.startswith(prefix) for key in keys)


def from_pretrained_with_new_head(model_class, source: str, **kwargs: Any):
    """`model_class.from_pretrained(source, **kwargs)`, transformers' load report logged only when the load differs
    from the checkpoint in more than a new head (`only_new_head`)."""
    logger = logging.getLogger(_LOGGER)
    held: list[logging.LogRecord] = []

    def hold_report(record: logging.LogRecord) -> bool:
        if LOAD_REPORT in str(record.msg):
            held.append(record)
            return False
        return True  # any other message of the module goes through

    logger.addFilter(hold_report)
    intended = False
    try:
        model, info = model_class.from_pretrained(source, output_loading_info=True, **kwargs)
        intended = only_new_head(model, info)
        return model
    finally:
        logger.removeFilter(hold_report)
        if not intended:  # more than a new head differs, or the load failed: transformers' report after all
            for record in held:
                logger.handle(record)
