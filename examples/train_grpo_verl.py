"""Train with Trinity-RFT's `grpo_verl` (GRPO, DeepSeekMath arXiv 2402.03300, with verl's trainer-side advantage:
the group-normalized sum of each completion's token rewards) through trl_ext.GRPOVerlTrainer.

    accelerate launch examples/train_grpo_verl.py                # offline tiny default, CPU
    accelerate launch examples/train_grpo_verl.py --config configs/grpo_verl.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the grpo_verl-specific ones are `--clip_range`,
`--clip_range_low`, `--clip_range_high`, `--clip_ratio_c`, `--loss_agg_mode`, `--advantage_epsilon`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("grpo_verl")
