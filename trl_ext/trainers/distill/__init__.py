"""The distillation family: on-policy distillation, rollouts scored by a teacher."""
