"""How a script was launched, checked against what was asked for.

`accelerate launch --num_processes 2 script.py` without `--multi_gpu` (or a `--config_file` naming a distributed type)
starts ONE process: accelerate's simple launcher exports `MASTER_ADDR` and `MASTER_PORT` for the processes it was
asked for, but no `WORLD_SIZE`, and the run trains alone. `check_launch` warns when it finds that environment.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping

ONE_PROCESS_OF_SEVERAL = (
    "accelerate launch was asked for several processes (--num_processes) but started one: its simple launcher runs "
    "one process unless --multi_gpu (also on CPU, with gloo) or a --config_file with a distributed type "
    "(configs/accelerate/multi_gpu.yaml) says how to start them; this run trains on 1 process"
)


def check_launch(environ: Mapping[str, str] | None = None) -> str | None:
    """Warn (and return the message) when `accelerate launch` was given several processes but started one (module
    docstring); None otherwise."""
    environ = os.environ if environ is None else environ
    by_accelerate = "ACCELERATE_DYNAMO_BACKEND" in environ  # set by every `accelerate launch`
    several = "MASTER_ADDR" in environ and "MASTER_PORT" in environ  # set by its simple launcher for > 1 process
    if by_accelerate and several and "WORLD_SIZE" not in environ:
        warnings.warn(ONE_PROCESS_OF_SEVERAL, UserWarning, stacklevel=2)
        return ONE_PROCESS_OF_SEVERAL
    return None


__all__ = ["ONE_PROCESS_OF_SEVERAL", "check_launch"]
