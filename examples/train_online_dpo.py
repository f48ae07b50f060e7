"""Train with Online DPO (Guo et al. 2024, arXiv 2402.04792) through trl_ext.OnlineDPOTrainer: TRL's experimental
OnlineDPOTrainer (two completions sampled per prompt, ranked by the reward functions) with the ported DPO / IPO loss.

    accelerate launch examples/train_online_dpo.py    # offline tiny default: the toy prompts and their reward
    accelerate launch examples/train_online_dpo.py --config configs/online_dpo.yaml --model_name_or_path <model> \
        --dataset_name trl-lib/ultrafeedback-prompt --reward_model_name_or_path trl-lib/Qwen2-0.5B-Reward

Every flag of TRL's OnlineDPOConfig works, with the GRPO scripts' `--reward_funcs` / `--reward_model_name_or_path`
(see `trl_ext/scripts/online_dpo.py`); the loss's are `--loss_type` (sigmoid, ipo), `--beta` (one per epoch) and
`--missing_eos_penalty`.
"""

from trl_ext.scripts.online_dpo import main

if __name__ == "__main__":
    main()
