"""Train trl_ext's SFT trainer with TRL's command-line conventions (the code behind `examples/train_sft.py`).

    accelerate launch examples/train_sft.py                                    # the offline tiny default
    accelerate launch examples/train_sft.py --config configs/sft.yaml \\
        --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name trl-lib/Capybara \\
        --sft_loss_fn sft_phi --cutoff_prob 0.9 --use_peft --lora_r 32 --report_to wandb

Arguments are parsed by `trl.TrlParser` into TRL's `ScriptArguments` (`--dataset_name`, `--dataset_train_split`,
...), `trl_ext.SFTConfig` (every `trl.SFTConfig` flag plus `--sft_loss_fn`, `--cutoff_prob` and `--loss_agg_mode`;
TRL's `--loss_type nll|dft` still works), `trl.ModelConfig` and `trl.DatasetMixtureConfig`, as `trl sft` does;
`--config recipe.yaml` sets any of them.

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` on the toy task's expert demonstrations (`toy_expert_dataset`: prompt "Repeat the letter c:",
completion " c c c"), evaluating on held-out demonstrations (the `--dataset_test_split` split, default "test").
The toy defaults (`trl_ext.toy.SFT_TRAINING`), the run summary and the usage errors are
`DatasetScript`'s (`_dataset_script.py`).
"""

from ..toy import SFT_TRAINING, toy_expert_dataset
from ._dataset_script import DatasetScript

SCRIPT = DatasetScript(
    algorithm="sft",
    toy_data=toy_expert_dataset,
    toy_training=SFT_TRAINING,
    toy_training_name="trl_ext.toy.SFT_TRAINING",
    data_description="the toy task's expert demonstrations (trl_ext.toy.toy_expert_dataset)",
)
make_parser, train, main = SCRIPT.make_parser, SCRIPT.train, SCRIPT.main
