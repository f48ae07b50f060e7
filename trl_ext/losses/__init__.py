"""Framework-free ports of Trinity-RFT's policy losses, loss aggregation, KL and entropy terms.

Pure torch: importing this package needs nothing but torch.

    from trl_ext.losses import get_policy_loss, POLICY_LOSSES, aggregate_loss, get_kl_fn
    fn = get_policy_loss("sapo", tau_neg=1.1)
    loss, metrics = fn(logprob=lp, old_logprob=olp, action_mask=m, advantages=adv)

`fn.inputs()` lists the keywords a loss reads; the input rules (unknown keywords, masks, empty batches,
non-finite values) are in `trl_ext.losses.inputs`. The critic's loss of PPO is a plain function,
`clipped_value_loss(vpreds, values, returns, response_mask, cliprange_value)` (with `explained_variance`, in
`trl_ext.losses.value`).
"""

import importlib
import pkgutil

from ..components import MAX, MEAN, MIN, SHARE, Argument
from .a2po import A2POPolicyLoss
from .aggregation import EPS, LOSS_AGG_MODES
from .base import POLICY_LOSSES, PolicyLoss, get_policy_loss, register_policy_loss
from .cispo import CISPOPolicyLoss
from .cov import ClipCovPolicyLoss, KLCovPolicyLoss
from .decoupled_ppo import DecoupledPPOPolicyLoss, loglinear_proximal_logprob
from .dpo import DPOLoss, TRLDPOLoss
from .dppo import DPPOKLPolicyLoss, DPPOTVPolicyLoss
from .dro import DROPolicyLoss
from .entropy import ENTROPY_FNS, EntropyFn, get_entropy_fn
from .gmpo import GMPOPolicyLoss
from .gpg import GPGPolicyLoss
from .gspo import GSPOPolicyLoss
from .importance_sampling import ImportanceSamplingLoss
from .inputs import BATCH_INPUTS, WINDOW_INPUTS
from .kl import KL_FNS, KLFn, get_kl_fn
from .luspo import LUSPOPolicyLoss
from .m2po import M2POPolicyLoss, m2po_mask
from .masked_batch import MaskedBatch, aggregate_loss
from .mix import MIXCHORDPolicyLoss, MIXPolicyLoss, mu_schedule
from .opmd import OPMDPolicyLoss
from .ppo import PPOPolicyLoss
from .rec import RECPolicyLoss
from .sapo import SAPOPolicyLoss
from .sft import SFTISLoss, SFTLoss, SFTPhiLoss
from .sppo import SPPOPolicyLoss
from .topr import TOPRPolicyLoss
from .tpo import TPOLoss
from .trl_grpo import TRLGRPOLoss
from .value import clipped_value_loss, explained_variance
from .vespo import VESPOPolicyLoss

# Every module of the package registers its losses on import: a new loss is one file here (and one algorithm record).
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "BATCH_INPUTS",
    "ENTROPY_FNS",
    "EPS",
    "KL_FNS",
    "LOSS_AGG_MODES",
    "MAX",
    "MEAN",
    "MIN",
    "POLICY_LOSSES",
    "SHARE",
    "WINDOW_INPUTS",
    "A2POPolicyLoss",
    "Argument",
    "CISPOPolicyLoss",
    "ClipCovPolicyLoss",
    "DPOLoss",
    "DPPOKLPolicyLoss",
    "DPPOTVPolicyLoss",
    "DROPolicyLoss",
    "DecoupledPPOPolicyLoss",
    "EntropyFn",
    "GMPOPolicyLoss",
    "GPGPolicyLoss",
    "GSPOPolicyLoss",
    "ImportanceSamplingLoss",
    "KLCovPolicyLoss",
    "KLFn",
    "LUSPOPolicyLoss",
    "M2POPolicyLoss",
    "MIXCHORDPolicyLoss",
    "MIXPolicyLoss",
    "MaskedBatch",
    "OPMDPolicyLoss",
    "PPOPolicyLoss",
    "PolicyLoss",
    "RECPolicyLoss",
    "SAPOPolicyLoss",
    "SFTISLoss",
    "SFTLoss",
    "SFTPhiLoss",
    "SPPOPolicyLoss",
    "TOPRPolicyLoss",
    "TPOLoss",
    "TRLDPOLoss",
    "TRLGRPOLoss",
    "VESPOPolicyLoss",
    "aggregate_loss",
    "clipped_value_loss",
    "explained_variance",
    "get_entropy_fn",
    "get_kl_fn",
    "get_policy_loss",
    "loglinear_proximal_logprob",
    "m2po_mask",
    "mu_schedule",
    "register_policy_loss",
]
