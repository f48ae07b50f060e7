"""Train with RAFT (Reward rAnked FineTuning, arXiv 2304.06767) through trl_ext.RAFTTrainer.

    accelerate launch examples/train_raft.py                     # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_raft.py --config configs/raft.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the raft-specific ones are `--loss_agg_mode`,
`--min_reward`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("raft")
