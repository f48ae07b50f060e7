"""The A*-PO family: TRL's experimental A2POTrainer with trl_ext's `a2po` loss."""
