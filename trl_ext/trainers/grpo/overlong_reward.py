"""The overlong reward shaping fields of the GRPO-family configs: DAPO's soft length penalty
(`trl_ext.advantages.overlong`, its formula and paper), added to every completion's reward."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..._validation import check_number
from ..core.arguments import _help
from ..core.documented_defaults import documented_default

PAPER_LENGTH_TO_BUFFER = 5
"""`overlong_buffer=None` is `max_completion_length` / 5: the paper's 4096 tokens of 20480."""

__all__ = ["OverlongRewardArguments"]


@dataclass
class OverlongRewardArguments:
    """The overlong reward shaping fields of the GRPO-family configs (see the module docstring)."""

    overlong_buffer: int | None = field(
        default=0,
        metadata=_help(
            "DAPO's overlong reward shaping: the last `overlong_buffer` tokens before `max_completion_length` over "
            "which a completion's reward falls linearly, by up to `overlong_penalty_factor` at the maximum length "
            "(arXiv 2503.14476 §3.4; the paper's 4096 of 20480). Logged as `rewards/overlong_penalty/mean`. 0: off; "
            "None: a fifth of `max_completion_length`, the paper's ratio."
        ),
    )
    overlong_penalty_factor: float = field(
        default=1.0,
        metadata=_help("The penalty of a completion of `max_completion_length` tokens (with `overlong_buffer` > 0)."),
    )

    def _check_overlong_reward(self) -> None:
        """Each overlong-reward field on its own (the buffer within `max_completion_length`: `config_rules`)."""
        owner = type(self).__name__
        if self.overlong_buffer is None:  # the paper's ratio, resolved once (marked as a default, not a user's value)
            buffer = max(1, self.max_completion_length // PAPER_LENGTH_TO_BUFFER)
            self.overlong_buffer = documented_default(buffer, integer=True)
        check_number(owner, "overlong_buffer", self.overlong_buffer, ge=0, integer=True)
        check_number(owner, "overlong_penalty_factor", self.overlong_penalty_factor, ge=0)
