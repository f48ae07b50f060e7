"""One SGD step of trl_ext.DPOTrainer on 4 fixed preference pairs (the whole dataset, so every split sees them
all); saves the parameter update and the logged metrics (for test_dpo_trainer's 1-process vs 2-process
comparison). Run as `python dpo_run.py OUT --model M --batch 4` or under `torchrun --nproc_per_node 2` with
`--batch 2`."""

import argparse
import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from trl_ext import DPOConfig, DPOTrainer  # noqa: E402
from trl_ext.toy import build_tokenizer, toy_preference_dataset  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch", type=int, required=True)
    args = parser.parse_args()
    config = DPOConfig(
        output_dir=os.path.join(os.path.dirname(args.out), "run"),
        use_cpu=True,
        bf16=False,
        activation_checkpointing=False,
        per_device_train_batch_size=args.batch,
        max_steps=1,
        optim="sgd",
        learning_rate=1.0,
        max_grad_norm=0.0,
        kl_coef=1.0,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    trainer = DPOTrainer(
        model=args.model, args=config, train_dataset=toy_preference_dataset(4), processing_class=build_tokenizer()
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    update = torch.cat([(p.detach() - before[n]).flatten() for n, p in trainer.model.named_parameters()])
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save({"update": update, "logs": trainer.state.log_history[0]}, args.out)


if __name__ == "__main__":
    sys.exit(main())
