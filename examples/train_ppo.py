"""Train with critic PPO (Schulman et al. 2017, arXiv 1707.06347; Trinity-RFT's `ppo` row) through trl_ext.PPOTrainer.

    accelerate launch examples/train_ppo.py                      # offline tiny default, CPU, < 3 minutes
    accelerate launch examples/train_ppo.py --config configs/ppo.yaml --model_name_or_path <model> \
        --dataset_name <dataset> --reward_funcs accuracy_reward [--use_peft --lora_r 16] [--report_to wandb]

A value model (`--value_model_name_or_path`, default: the policy's checkpoint with a new scalar head) trains beside
the policy with the clipped value loss (`--cliprange_value`) and its own optimizer (`--critic_learning_rate`,
`--critic_warmup_steps`), or, with `--shared_backbone true`, a value head on the policy's own backbone whose loss
joins the policy's (`--vf_coef`); GAE (`--gamma`, `--lam`) turns its values and the rewards into whitened per-token
advantages. DDP and DeepSpeed ZeRO-2/3 accelerate configs work (configs/accelerate/). Every TRL flag works (see
`trl_ext/scripts/grpo.py`); the PPO loss's are `--clip_range`, `--clip_ratio_c`, `--loss_agg_mode`. Logged:
`vf_loss`, `vf_clipfrac`, `vpred_mean`, `critic/returns`, `critic/values`, `critic/explained_variance`.
"""

from trl_ext.scripts.grpo import main

if __name__ == "__main__":
    main("ppo")
