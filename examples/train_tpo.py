"""Train with TPO (Triple Preference Optimization, Saeidi et al. 2024, arXiv 2405.16681) through trl_ext.TPOTrainer:
TRL's experimental TPOTrainer with the ported loss, a preference loss on each (chosen, rejected) pair plus the NLL of
the gold reference completion, normalized over the optimizer window.

    accelerate launch examples/train_tpo.py           # offline tiny default: the toy task's embedded triples
    accelerate launch examples/train_tpo.py --config configs/tpo.yaml --model_name_or_path <model> \
        --dataset_name <dataset with chosen, rejected and reference columns>

Every flag of TRL's TPOConfig works (see `trl_ext/scripts/tpo.py`); the loss's are `--loss_type`, `--beta`,
`--label_smoothing`, `--tpo_alpha` and `--tpo_l_gamma`.
"""

from trl_ext.scripts.tpo import main

if __name__ == "__main__":
    main()
