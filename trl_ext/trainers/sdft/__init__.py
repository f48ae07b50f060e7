"""The SDFT family: TRL's experimental SDFTTrainer (self-distillation fine-tuning) with the ported loss."""
