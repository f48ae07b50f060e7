"""The GRPO family: TRL's GRPOTrainer adapted once for every algorithm that trains on its rollouts."""
