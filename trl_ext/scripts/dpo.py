"""Train trl_ext's DPO trainer with TRL's command-line conventions (the code behind `examples/train_dpo.py`).

    accelerate launch examples/train_dpo.py                                    # the offline tiny default
    accelerate launch examples/train_dpo.py --config configs/dpo.yaml \\
        --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --dataset_name trl-lib/ultrafeedback_binarized \\
        --use_peft --lora_r 32 --report_to wandb

Arguments are parsed by `trl.TrlParser` into TRL's `ScriptArguments` (`--dataset_name`, `--dataset_train_split`,
...), `trl_ext.DPOConfig` (every `trl.DPOConfig` flag plus `--kl_loss_fn` and `--kl_coef`), `trl.ModelConfig` and
`trl.DatasetMixtureConfig`, as `trl dpo` does; `--config recipe.yaml` sets any of them.

Without `--model_name_or_path`, the script trains the package's embedded default: the tiny offline model of
`trl_ext.toy` on the toy task's preference pairs (`toy_preference_dataset`: the prompt's letter repeated is
chosen, another letter rejected), evaluating on held-out pairs (the `--dataset_test_split` split, default "test").
The toy defaults (`trl_ext.toy.DPO_TRAINING`), the run summary and the usage errors are
`DatasetScript`'s (`_dataset_script.py`).
"""

from ..toy import DPO_TRAINING, toy_preference_dataset
from ._dataset_script import DatasetScript

SCRIPT = DatasetScript(
    algorithm="dpo",
    toy_data=toy_preference_dataset,
    toy_training=DPO_TRAINING,
    toy_training_name="trl_ext.toy.DPO_TRAINING",
    data_description="the toy task's preference pairs (trl_ext.toy.toy_preference_dataset)",
)
make_parser, train, main = SCRIPT.make_parser, SCRIPT.train, SCRIPT.main
