"""The SFT family: TRL's SFTTrainer with the trl_ext SFT losses, and continued pretraining (CPT)."""
