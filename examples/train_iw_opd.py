"""Train with IW-OPD (Xie et al. 2026, "On the Position Bias of On-Policy Distillation", arXiv 2606.22600) through
trl_ext.IWOPDTrainer: TRL's experimental IWOPDTrainer with the ported loss, normalized over the optimizer window.

    accelerate launch examples/train_iw_opd.py        # offline tiny default: the toy task distilled from its teacher
    accelerate launch examples/train_iw_opd.py --config configs/iw_opd.yaml --model_name_or_path <student> \
        --teacher_model_name_or_path <teacher> --dataset_name <dataset with a 'messages' column>

Every flag of TRL's experimental `IWOPDConfig` works (see `trl_ext/scripts/iw_opd.py`); the loss's are
`--distillation_objective`, `--iw_opd_gamma`, `--iw_opd_epsilon`, `--beta`, `--temperature`, `--loss_top_k`,
`--loss_add_tail` and `--reverse_kl_top_1_mode`.
"""

from trl_ext.scripts.iw_opd import main

if __name__ == "__main__":
    main()
