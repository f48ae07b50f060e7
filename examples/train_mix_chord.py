"""Train with CHORD (arXiv 2508.11408: RL on rollouts + φ-weighted SFT on expert demonstrations, blended by a μ
that follows the global step) through trl_ext.MIXCHORDTrainer.

    accelerate launch examples/train_mix_chord.py                # offline tiny default with embedded demonstrations
    accelerate launch examples/train_mix_chord.py --config configs/mix_chord.yaml --model_name_or_path <model> \
        --dataset_name <prompts> --expert_dataset_name <demonstrations> --reward_funcs accuracy_reward

Every TRL flag works (see `trl_ext/scripts/grpo.py`); the CHORD-specific ones are `--expert_data_ratio`,
`--mu_warmup_steps`, `--mu_decay_steps`, `--mu_peak`, `--mu_valley`, `--enable_phi_function`, `--clip_range`,
`--loss_agg_mode`, `--expert_dataset_name`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("mix_chord")
