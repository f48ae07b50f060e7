"""Train a few steps under the accelerate engine this process was launched with (FSDP2 or DeepSpeed ZeRO-3) and
write what the test checks to a JSON file: the losses, and whether the policy, the reference model and the teacher
are sharded by the engine (FSDP2: DTensor parameters; ZeRO-3: partitioned parameters with a `ds_id`).

    accelerate launch --config_file configs/accelerate/fsdp.yaml --num_processes 1 \
        tests/gpu/scripts/engine_run.py OUT.json --algorithm sapo --model PATH [--teacher PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
GPU_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [GPU_TESTS, os.path.dirname(GPU_TESTS)]  # tests/gpu (the trainer builder) and tests (its helpers)

import torch  # noqa: E402
from test_cuda import build  # noqa: E402


def sharded(module) -> bool | None:
    if module is None:
        return None
    module = getattr(module, "module", module)  # a DeepSpeed engine wraps the model
    parameters = list(module.parameters())
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - old torch
        DTensor = ()
    return bool(parameters) and all(isinstance(p, DTensor) or hasattr(p, "ds_id") for p in parameters)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--algorithm", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--teacher")
    parser.add_argument("--teacher-top-k", type=int, help="on_policy_distill's dense mode (teacher_top_k)")
    args = parser.parse_args()
    output_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)), f"run-{args.algorithm}")
    dense = {} if args.teacher_top_k is None else {"teacher_top_k": args.teacher_top_k}
    trainer = build(args.algorithm, args.model, output_dir, teacher=args.teacher, max_steps=3, **dense)
    trainer.train()
    result = {
        "fsdp": bool(trainer.is_fsdp_enabled),
        "deepspeed": bool(trainer.is_deepspeed_enabled),
        "policy_sharded": sharded(trainer.model_wrapped),
        "ref_sharded": sharded(getattr(trainer, "ref_model", None)),
        "teacher_sharded": sharded(getattr(trainer, "teacher_model", None)),
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
        "kl": [entry["kl"] for entry in trainer.state.log_history if "kl" in entry],
        "divergence": [e["distill/divergence"] for e in trainer.state.log_history if "distill/divergence" in e],
        "device": str(torch.cuda.get_device_name()),
    }
    if trainer.accelerator.is_main_process:
        with open(args.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
