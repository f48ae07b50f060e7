"""The TPO family: TRL's experimental TPOTrainer with the trl_ext TPO loss."""
