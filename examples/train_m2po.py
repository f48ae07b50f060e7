"""Train with M2PO (Zheng et al. 2025, arXiv 2510.01161) on stale rollouts through trl_ext.M2POTrainer.

    accelerate launch examples/train_m2po.py --steps_per_generation 4   # offline tiny default, CPU, stale x4
    accelerate launch examples/train_m2po.py --config configs/m2po.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

M2PO is for rollouts that lag behind the policy: `--steps_per_generation` larger than `--gradient_accumulation_steps`
(the recipe: 4 and 1) trains several optimizer steps on each generation batch. Every TRL flag works (see
`trl_ext/scripts/grpo.py`); the m2po-specific ones are `--m2_threshold`, `--log_ratio_clip`, `--loss_agg_mode`,
`--advantage_epsilon`, `--std_threshold`, `--std_cal_level`. The logged `m2po/masked_fraction`,
`m2po/m2_before` and `m2po/m2_after` show how much of each step the second-moment bound masks.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("m2po")
