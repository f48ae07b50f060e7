"""The Online DPO family: TRL's experimental OnlineDPOTrainer with the ported Online DPO loss."""
