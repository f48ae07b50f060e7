"""The noise of a training script that trl_ext knows to be harmless: silenced around the calls that cause it, each
filter narrowed to its message, category and module; what cannot be silenced is said once, in the run summary.

Silenced (`quiet_known_warnings`, around the trainer's construction and its training in the scripts):

* transformers 5's FutureWarning that `PreTrainedModel.is_gradient_checkpointing` is deprecated. TRL 1.16 reads it
  around every generation and in DPO's training step (`disable_gradient_checkpointing`), and PEFT reads it when it
  wraps the model (`--use_peft`: `PeftModel.__init__`); the value read is right, and nothing the scripts pass avoids
  the read.
* TRL's notice that `environment_factory` is an experimental feature (the multi-turn algorithms' rollouts). trl_ext
  pins TRL to the minor release its trainers are tested on (1.16.x), so the API cannot change under it. TRL warns
  with `stacklevel=2`, so the notice is attributed to trl_ext's trainer that calls TRL's constructor; the filter
  takes only warnings attributed to a trl_ext module (a user's own call still gets TRL's notice).

Said once (`noise_notes`): DDP's warning that `find_unused_parameters=True` found no unused parameter. It is a C++
warning of torch (no Python filter reaches it), and whether every parameter gets a gradient depends on the model:
the toy model's do (its defaults turn the search off), a real model's are for the user to say
(`--ddp_find_unused_parameters false`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

IS_GRADIENT_CHECKPOINTING = r"`is_gradient_checkpointing` is deprecated"
"""transformers' deprecation of the attribute that TRL 1.16 and PEFT read (a FutureWarning of
`transformers.modeling_utils`)."""

ENVIRONMENT_FACTORY_NOTICE = r"You are using 'environment_factory', which is an experimental feature"
"""TRL's notice on `environment_factory` (a UserWarning, attributed to TRL's caller)."""


@contextlib.contextmanager
def quiet_known_warnings() -> Iterator[None]:
    """Within the block, ignore the warnings above, each for its message, category and module only."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=IS_GRADIENT_CHECKPOINTING, category=FutureWarning, module=r"transformers\.modeling_utils"
        )
        warnings.filterwarnings("ignore", message=ENVIRONMENT_FACTORY_NOTICE, category=UserWarning, module=r"trl_ext\.")
        yield


def searches_unused_parameters(trainer) -> bool:
    """Whether the trainer's model will be wrapped in DDP with `find_unused_parameters=True` (transformers' default
    without activation checkpointing, unless `ddp_find_unused_parameters` says otherwise)."""
    accelerator = trainer.accelerator
    kind = getattr(accelerator.distributed_type, "value", str(accelerator.distributed_type))
    handler = getattr(accelerator, "ddp_handler", None)
    data_parallel = accelerator.num_processes > 1 and kind.startswith("MULTI_")  # not DeepSpeed, FSDP, ...
    return data_parallel and bool(getattr(handler, "find_unused_parameters", False))


def noise_notes(trainer) -> list[str]:
    """Run-summary lines for the expected noise that no filter reaches (empty when there is none)."""
    if not searches_unused_parameters(trainer):
        return []
    return [
        "  note        DDP searches every step for parameters without a gradient (find_unused_parameters=True, "
        "transformers' default without activation checkpointing) and warns when it finds none; if every trainable "
        "parameter of the model gets a gradient, --ddp_find_unused_parameters false skips the search"
    ]
