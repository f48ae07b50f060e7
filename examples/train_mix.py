"""Train with MIX (RL on rollouts + SFT on expert demonstrations in the same batch, Trinity-RFT) through
trl_ext.MIXTrainer.

    accelerate launch examples/train_mix.py                      # offline tiny default with embedded demonstrations
    accelerate launch examples/train_mix.py --config configs/mix.yaml --model_name_or_path <model> \
        --dataset_name <prompts> --expert_dataset_name <demonstrations> --reward_funcs accuracy_reward

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the mix-specific ones are `--expert_data_ratio`, `--mu`,
`--clip_range`, `--loss_agg_mode`, `--sft_loss_agg_mode`, `--grpo_loss_agg_mode`, `--expert_dataset_name`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("mix")
