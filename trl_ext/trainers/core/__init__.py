"""What every trainer family shares: the loss step, the optimizer window, model turns."""
