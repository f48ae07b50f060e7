"""trl_ext: Trinity-RFT's reinforcement fine-tuning algorithms for Hugging Face TRL.

The loss library (`trl_ext.losses`), the advantage estimators (`trl_ext.advantages`) and the
algorithm table (`get_algorithm`) are pure torch: importing them does not import trl.
"""

from .algorithms import ALGORITHMS, AlgorithmSpec, get_algorithm

__version__ = "0.1.0.dev0"

__all__ = ["ALGORITHMS", "AlgorithmSpec", "__version__", "get_algorithm"]
