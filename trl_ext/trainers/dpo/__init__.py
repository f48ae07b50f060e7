"""The DPO family: TRL's DPOTrainer with the trl_ext DPO loss."""
