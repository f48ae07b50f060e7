"""The SDPO family: TRL's experimental SDPOTrainer (self-distillation policy optimization) with the ported objective."""
