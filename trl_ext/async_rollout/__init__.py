"""An offline rollout worker for TRL's asynchronous GRPO (`trl.experimental.async_grpo.AsyncGRPOTrainer`).

* `TransformersRolloutWorker` (`worker.py`): TRL's `RolloutWorkerProtocol`, generating with transformers in a spawned
  child process (CPU by default), so `AsyncGRPOTrainer` trains without a vLLM server; the child's loop is
  `rollout_loop.py`;
* `LocalWeightTransfer` (`weights.py`): TRL's `WeightTransferProtocol` into that child through shared CPU memory,
  numbering the weights it sends 1, 2, ... (the version each sample is stamped with);
* `GroupScorer` (`scoring.py`): scores one complete group (rewards, then a trl_ext advantage estimator), as TRL's
  worker does; `check_async_estimator` refuses the estimators that cannot run per group;
* `trl_loop.py`: the same estimators inside TRL's own vLLM worker (`use_trl_ext_scoring`).

    from trl_ext.async_rollout import GroupScorer, TransformersRolloutWorker

    scorer = GroupScorer(reward_funcs=[my_reward], advantage_fn="grpo")
    worker = TransformersRolloutWorker(model_path=path, dataset=dataset, processing_class=tokenizer, scorer=scorer,
                                       num_generations=8, max_completion_length=64)
    trainer = AsyncGRPOTrainer(..., rollout_worker=worker, weight_transfer=worker.weight_transfer)
"""

import warnings

with warnings.catch_warnings():
    # The asynchronous trainer stands on TRL's experimental API (`trl.experimental.async_grpo`), imported with the
    # trainers: TRL's notice would reach every user of any trl_ext trainer. docs/algorithms/async.md says it instead.
    warnings.filterwarnings("ignore", message="You are importing from 'trl.experimental'")
    import trl.experimental  # noqa: F401

from .scoring import WORKER_INPUTS, GroupScore, GroupScorer, check_async_estimator, reward_func_name
from .weights import LocalWeightTransfer, WeightReceiver, parameter_manifest
from .worker import DTYPES, TransformersRolloutWorker

__all__ = [
    "DTYPES",
    "WORKER_INPUTS",
    "GroupScore",
    "GroupScorer",
    "LocalWeightTransfer",
    "TransformersRolloutWorker",
    "WeightReceiver",
    "check_async_estimator",
    "parameter_manifest",
    "reward_func_name",
]
