"""Where a script's model comes from, checked before anything loads: a local directory, the local Hugging Face cache,
or the Hub.

transformers' `from_pretrained` on a model id the machine cannot fetch retries for about half a minute and then
raises a chained traceback some 75 lines long; `check_model_source` says the same in one line, naming the id and
what to do, in well under a second: a local path that does not exist, an id absent from the cache with
`HF_HUB_OFFLINE` set, an id the Hub does not have, or a Hub that cannot be reached (one request, `HUB_TIMEOUT_S`).
"""

from __future__ import annotations

import os

from ._common import UsageError
from .dataset_loading import only_local

HUB_TIMEOUT_S = 10.0
"""How long the one request to the Hub may take before the model is reported unreachable."""

_OFFLINE_REMEDY = "pass a local directory, or download the model where the Hub is reachable (`hf download {name}`)"


def check_model_source(name: str | None, flag: str = "--model_name_or_path") -> None:
    """Raise a one-line `UsageError` when model `name` (None: the embedded default, nothing to check) can be loaded
    from neither a local directory, nor the local cache, nor the Hub (module docstring)."""
    if name is None:
        return
    path = os.path.expanduser(name)
    if os.path.isdir(path):
        return
    if only_local(name) or os.path.exists(path):
        raise UsageError(
            f"{flag} {name}: no such model directory ({os.path.abspath(path)}; a local path, so it was not looked up "
            "on the Hub)"
        )
    from huggingface_hub import HfApi, constants, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return  # in the local cache: transformers loads it from there
    remedy = _OFFLINE_REMEDY.format(name=name)
    if constants.HF_HUB_OFFLINE:
        raise UsageError(
            f"{flag} {name}: not a local directory, and not in the local Hugging Face cache (HF_HUB_OFFLINE is set, so "
            f"the Hub was not asked); {remedy}"
        )
    try:
        HfApi().model_info(name, timeout=HUB_TIMEOUT_S)
    except GatedRepoError:
        return  # a gated model: loading it says what access it needs
    except RepositoryNotFoundError:
        raise UsageError(
            f"{flag} {name}: no such local directory, and no such model on the Hub (or a private one that the saved "
            "token cannot read: `hf auth login`)"
        ) from None
    except HfHubHTTPError:
        return  # the Hub answered: loading it reports what it says
    except Exception as error:  # the Hub cannot be reached (no network, DNS, a proxy, a timeout)
        reason = " ".join(str(error).split()) or type(error).__name__
        raise UsageError(
            f"{flag} {name}: not a local directory, not in the local cache, and the Hub could not be reached "
            f"({reason}); {remedy}, or set HF_HUB_OFFLINE=1 to load only from the cache"
        ) from None


__all__ = ["HUB_TIMEOUT_S", "check_model_source"]
