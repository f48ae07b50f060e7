"""Train with LUSPO (Length-Unbiased Sequence Policy Optimization, arXiv 2602.05261; TRL's `loss_type="luspo"`)
through trl_ext.LUSPOTrainer.

    accelerate launch examples/train_luspo.py                    # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_luspo.py --config configs/luspo.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the luspo-specific ones are `--clip_range_low`,
`--clip_range_high`, `--ratio_level`, `--ratio_cap`, `--loss_agg_mode`, `--advantage_epsilon`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("luspo")
