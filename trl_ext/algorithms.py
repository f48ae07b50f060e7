"""The algorithm records: one per algorithm, the single source of everything else.

    from trl_ext import get_algorithm
    spec = get_algorithm("sapo")
    spec.policy_loss_fn, spec.advantage_fn, spec.kl_loss_fn, spec.entropy_loss_fn  # 'sapo', 'grpo', 'none', 'none'
    spec.config_class, spec.trainer_class                                          # SAPOConfig, SAPOTrainer

A record names the algorithm, its one paper, its default components (policy loss, advantage, KL, entropy), the
trainer family that trains it (`trl_ext.families`) and Trinity-RFT's flags that mean something for a TRL trainer:
`use_critic` (it trains a value model: only a family with a critic can take it), `use_reference` (it may have a KL
term to a reference model: without it the config refuses a KL coefficient, and no reference model is loaded) and
`repeat_times` (the default group size: the config's `num_generations`).

This module is the built-in table; the record type and the registry are `trl_ext.algorithm_spec` (re-exported here).
Adding an algorithm whose loss and advantage exist is one `register_algorithm(AlgorithmSpec(...))`; a new loss is its
`@register_policy_loss` class plus a record.
"""

from __future__ import annotations

from .algorithm_spec import ALGORITHMS, AlgorithmSpec, Paper, get_algorithm, provide_classes, register_algorithm

__all__ = ["ALGORITHMS", "AlgorithmSpec", "Paper", "get_algorithm", "provide_classes", "register_algorithm"]

# fmt: off
_CHORD = Paper(
    "On-Policy RL Meets Off-Policy Experts: Harmonizing Supervised Fine-Tuning and Reinforcement Learning via "
    "Dynamic Weighting",
    "2508.11408",
)
ALGORITHMS.update({s.name: s for s in [
    AlgorithmSpec("sft", "Supervised fine-tuning (negative log-likelihood).",
        None,
        use_reference=False, repeat_times=1,
        policy_loss_fn="sft", advantage_fn=None, kl_loss_fn="none", entropy_loss_fn="none",
        trainer="sft"),
    AlgorithmSpec("ppo", "PPO with a critic and GAE advantages.",
        Paper("Proximal Policy Optimization Algorithms", "1707.06347"),
        use_critic=True, use_reference=True, repeat_times=1,
        policy_loss_fn="ppo", advantage_fn="ppo", kl_loss_fn="k2", entropy_loss_fn="default",
        trainer="critic", class_prefix="PPO",
        details="A value model (`value_model`, default: the policy's checkpoint with a new scalar head) is trained "
        "beside the policy with verl's clipped value loss (`cliprange_value`) and its own optimizer "
        "(`critic_learning_rate`); GAE (`gamma`, `lam`) turns its values and the token rewards into whitened "
        "advantages. One sample per prompt by default (`num_generations=1`)."),
    AlgorithmSpec("grpo", "GRPO: group-normalized advantages, dual-clip PPO loss.",
        Paper("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models", "2402.03300"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="ppo", advantage_fn="grpo", kl_loss_fn="k2", entropy_loss_fn="default",
        trl_losses=True,
        details="`loss_agg_mode='token-mean'` is TRL's default `dapo` aggregation; `'seq-mean-token-mean'` is the "
        "paper's. Setting any of TRL's loss fields (`loss_type`, `importance_sampling_level`, `epsilon`, "
        "`epsilon_high`, `delta`, `sapo_temperature_*`, `vespo_*`) trains TRL's own loss instead, exactly (its "
        "advantages, KL estimator `k3` and token-mean entropy bonus included); trl_ext's KL estimators, advantage "
        "arguments and window normalization still apply. TRL's equivalent is `loss_type='dapo'` with "
        "`loss_agg_mode='token-mean'`."),
    AlgorithmSpec("dapo", "DAPO: decoupled clip, token-level loss, dynamic sampling, overlong reward shaping.",
        Paper("DAPO: An Open-Source LLM Reinforcement Learning System at Scale", "2503.14476"),
        use_reference=False, repeat_times=16,
        policy_loss_fn="ppo", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="default",
        paper_settings=(("clip_range_high", 0.28), ("clip_ratio_c", None), ("dynamic_sampling", True),
                        ("overlong_buffer", None)),
        details="GRPO's group advantage and the PPO loss with DAPO's four techniques, all on by default as in the "
        "paper: the decoupled clip (`clip_range_low` 0.2, `clip_range_high` 0.28: clip-higher; no dual clip), the "
        "token-level loss (`loss_agg_mode='token-mean'`), dynamic sampling (`dynamic_sampling=True`: groups whose "
        "rewards are all equal, which give no gradient, are dropped and more prompts sampled, up to "
        "`dynamic_sampling_max_rounds` generation rounds) and overlong reward shaping (a completion longer than "
        "`max_completion_length` − `overlong_buffer` tokens loses up to `overlong_penalty_factor`, linearly in its "
        "length; the default buffer is a fifth of `max_completion_length`, the paper's 4096 of 20480). No KL term "
        "and no reference model. Trinity-RFT's record sets only the components (the `ppo` loss's symmetric clip, "
        "dynamic sampling and the overlong penalty off): its flags are this record's, and the paper's settings "
        "beside them are the config's defaults. The recipe configs/dapo.yaml adds the paper's scale (Trinity-RFT's "
        "`examples/dapo_math`). TRL's near-equivalent is `loss_type='dapo', epsilon=0.2, epsilon_high=0.28, "
        "beta=0` with the `get_soft_overlong_punishment` reward; TRL has no dynamic sampling."),
    AlgorithmSpec("grpo_verl", "GRPO with verl's trainer-side advantage: the group-normalized summed token rewards.",
        Paper("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models", "2402.03300"),
        use_reference=True, repeat_times=2,
        policy_loss_fn="ppo", advantage_fn="grpo_verl", kl_loss_fn="k2", entropy_loss_fn="default",
        class_prefix="GRPOVerl", display_name="GRPO (verl)",
        details="Trinity-RFT's `grpo_verl` (GRPOverlAlgorithm, whose advantage is computed in the trainer, verl's "
        "`compute_grpo_outcome_advantage`): each completion's token rewards are summed into R, A = (R − mean) / "
        "(std + `advantage_epsilon`) over its group (unbiased std; a group of one: mean 0, std 1), broadcast to every "
        "completion token; trained with the dual-clip PPO loss. Group size 2 by default (Trinity-RFT's "
        "`repeat_times`)."),
    AlgorithmSpec("reinforceplusplus", "REINFORCE++: batch-whitened discounted returns, PPO loss.",
        Paper("REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models", "2501.03262"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="ppo", advantage_fn="reinforceplusplus", kl_loss_fn="k2", entropy_loss_fn="default",
        class_prefix="ReinforcePlusPlus", display_name="REINFORCE++",
        details="The discounted token-level returns of the outcome reward are whitened over the batch's tokens "
        "(no group baseline)."),
    AlgorithmSpec("rloo", "RLOO: leave-one-out baseline, PPO loss.",
        Paper("Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs",
              "2402.14740"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="ppo", advantage_fn="rloo", kl_loss_fn="k2", entropy_loss_fn="default",
        details="The baseline of a completion is the mean reward of the other completions of its prompt."),
    AlgorithmSpec("opmd", "Online policy mirror descent.",
        Paper("Kimi k1.5: Scaling Reinforcement Learning with LLMs", "2501.12599"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="opmd", advantage_fn="opmd", kl_loss_fn="k2", entropy_loss_fn="default",
        details="Trinity-RFT's OPMD: the group baseline is the mean reward or a soft-max (`logavgexp`) of it, and "
        "the loss −A·lp is scaled by 1/(1 + τ)."),
    AlgorithmSpec("asymre", "AsymRE: REINFORCE with a shifted (asymmetric) group baseline.",
        Paper("Asymmetric REINFORCE for off-Policy Reinforcement Learning", "2506.20520"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="opmd", advantage_fn="asymre", kl_loss_fn="none", entropy_loss_fn="default",
        class_prefix="AsymRE", display_name="AsymRE",
        details="The baseline is the group mean shifted by `baseline_shift`; Trinity-RFT trains it with the OPMD "
        "loss."),
    AlgorithmSpec("dpo", "Direct Preference Optimization on (chosen, rejected) pairs.",
        Paper("Direct Preference Optimization: Your Language Model is Secretly a Reward Model", "2305.18290"),
        use_reference=True, repeat_times=2,
        policy_loss_fn="dpo", advantage_fn=None, kl_loss_fn="k2", entropy_loss_fn="default",
        trainer="dpo"),
    AlgorithmSpec("topr", "Tapered Off-Policy REINFORCE.",
        Paper("Tapered Off-Policy REINFORCE: Stable and efficient reinforcement learning for LLMs", "2503.14286"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="topr", advantage_fn="reinforce", kl_loss_fn="none", entropy_loss_fn="none",
        details="Full REINFORCE gradient on positive samples, ratio-truncated gradient on negative ones; the "
        "advantage is the raw reward (no baseline), as in the paper."),
    AlgorithmSpec("cispo", "CISPO: clipped, stop-gradient IS weight on a REINFORCE loss.",
        Paper("MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention", "2506.13585"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="cispo", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        details="Clipped tokens still get a gradient. TRL's equivalent is `loss_type='cispo', epsilon_high=1 + "
        "clip_range_high`."),
    AlgorithmSpec("gspo", "GSPO: sequence-level (length-normalized) importance ratio.",
        Paper("Group Sequence Policy Optimization", "2507.18071"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="gspo", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        details="GSPO-token form: the ratio exp(mean_t log r_t) keeps a per-token gradient path, so token-level "
        "advantages work. TRL's equivalent is `loss_type='grpo', importance_sampling_level='sequence', "
        "epsilon=3e-4, epsilon_high=4e-4`."),
    AlgorithmSpec("vespo", "VESPO: a smooth Gamma weight of the sequence's importance ratio instead of a clip.",
        Paper("VESPO: Variational Sequence-Level Soft Policy Optimization", "2602.10693"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="vespo", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        argument_defaults=(("epsilon", 1e-4),),
        details="TRL 1.16's `loss_type='vespo'` as a registered loss: −sg(φ(W))·A·lp with φ the paper's Gamma weight "
        "of the sequence ratio W (sampler's correction included), token-mean. The advantage is TRL's group "
        "normalization (std + 1e-4), so the defaults train TRL's objective; any estimator composes with it, "
        "asynchronously too."),
    AlgorithmSpec("luspo", "LUSPO: GSPO's sequence-level clipped objective scaled by each sequence's length.",
        Paper("Length-Unbiased Sequence Policy Optimization: Revealing and Controlling Response Length Variation "
              "in RLVR", "2602.05261"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="luspo", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        argument_defaults=(("epsilon", 1e-4),),
        details="TRL 1.16's `loss_type='luspo', importance_sampling_level='sequence'` as a registered loss: the "
        "clipped surrogate of the sequence ratio exp(mean_t log r_t), summed over each sequence's tokens and "
        "averaged over sequences (a sequence's loss × its length), with GSPO's clip bounds 3e-4 / 4e-4. The "
        "advantage is TRL's group normalization (std + 1e-4); any estimator composes with it, asynchronously too."),
    AlgorithmSpec("sapo", "SAPO: soft, temperature-controlled gate instead of hard clipping.",
        Paper("Soft Adaptive Policy Optimization", "2511.20347"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="sapo", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        details="The gate σ(τ(r − 1))·4/τ decays faster for negative advantages. TRL's equivalent is "
        "`loss_type='sapo'` with `loss_agg_mode='seq-mean-token-mean'`."),
    AlgorithmSpec("gpg", "GPG: group policy gradient, plain −A·lp with a batch-corrected group advantage.",
        Paper("GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning", "2504.02546"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="gpg", advantage_fn="gpg", kl_loss_fn="none", entropy_loss_fn="none",
        display_name="GPG",
        details="No ratio, no clip, no KL: the loss is −A·lp (verl's `gpg`), and the advantage is the reward minus "
        "its group mean scaled by α = N / (number of non-zero rewards), verl's `gpg` estimator."),
    AlgorithmSpec("geo_mean", "GMPO: the geometric mean of the token ratios, clipped in log space.",
        Paper("Geometric-Mean Policy Optimization", "2507.20673"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="geo_mean", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        class_prefix="GMPO", display_name="GMPO",
        details="verl's `geo_mean`: per sequence, −Ā·exp(mean_t clip(log r_t)), averaged over sequences; the paper "
        "clips the log-ratio at ±0.4 (configs/geo_mean.yaml), verl's default is 0.2."),
    AlgorithmSpec("dro", "DRO: policy gradient with a quadratic log-ratio penalty instead of a clip.",
        Paper("Offline Regularised Reinforcement Learning for Large Language Models Alignment", "2405.19107"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="dro", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        display_name="DRO",
        details="verl's `dro`: L = −(A·lp − ½β·(lp − old)²), `dro_beta` 0.05."),
    AlgorithmSpec("clip_cov", "Clip-Cov: PPO with a few high-covariance tokens detached (entropy control).",
        Paper("The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models", "2505.22617"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="clip_cov", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        class_prefix="ClipCov", display_name="Clip-Cov",
        details="verl's `clip_cov`: among the tokens PPO does not clip, a random `clip_cov_ratio` share of those "
        "whose advantage × log-prob covariance lies in (`clip_cov_lb`, `clip_cov_ub`) gets no gradient."),
    AlgorithmSpec("kl_cov", "KL-Cov: a |log-ratio| penalty on the highest-covariance tokens (entropy control).",
        Paper("The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models", "2505.22617"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="kl_cov", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        class_prefix="KLCov", display_name="KL-Cov",
        details="verl's `kl_cov`: −A·r plus `ppo_kl_coef`·|log r| on the top `kl_cov_ratio` share of tokens by "
        "advantage × log-prob covariance."),
    AlgorithmSpec("dppo_tv", "DPPO-Binary-TV: a trust region on the token probability's total variation.",
        Paper("Rethinking the Trust Region in LLM Reinforcement Learning", "2602.04879"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="dppo_tv", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        class_prefix="DPPOTV", display_name="DPPO-Binary-TV",
        details="verl's `dppo_tv`: a token whose probability moved more than δ (`clip_range`, the paper's 0.15 in "
        "configs/dppo_tv.yaml) in the advantage's direction is masked; the rest get −A·sg(min(r, c))·lp."),
    AlgorithmSpec("dppo_kl", "DPPO-Binary-KL: a trust region on the token's binary KL divergence.",
        Paper("Rethinking the Trust Region in LLM Reinforcement Learning", "2602.04879"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="dppo_kl", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        class_prefix="DPPOKL", display_name="DPPO-Binary-KL",
        details="verl's `dppo_kl`: as DPPO-Binary-TV with the binary KL of the token's probability (δ `clip_range`, "
        "the paper's 0.05 in configs/dppo_kl.yaml)."),
    AlgorithmSpec("mix", "RL on rollouts plus a fixed share of SFT on expert demonstrations.",
        _CHORD,
        use_reference=True, repeat_times=8,
        policy_loss_fn="mix", advantage_fn="grpo", kl_loss_fn="k2", entropy_loss_fn="mix",
        trainer="mix",
        details="Trinity-RFT's MIX, the fixed-μ form of CHORD. A share `expert_data_ratio` of each generation batch "
        "is expert rows from the trainer's `expert_dataset`; the loss is (1 − μ)·PPO on the rollouts "
        "(group-normalized advantages) + μ·SFT on the expert rows, each part normalized over its own rows."),
    AlgorithmSpec("mix_chord", "CHORD: scheduled mix of RL and phi-weighted SFT on expert data.",
        _CHORD,
        use_reference=True, repeat_times=8,
        policy_loss_fn="mix_chord", advantage_fn="grpo", kl_loss_fn="k2", entropy_loss_fn="mix",
        trainer="mix", class_prefix="MIXCHORD", display_name="MIX-CHORD",
        details="As MIX, with μ following the global step (linear warm-up to `mu_peak`, cosine decay to "
        "`mu_valley`) and CHORD-φ token weights on the expert NLL. The paper's recipe (Trinity-RFT's "
        "`examples/mix_chord`): `mu_warmup_steps=200, mu_decay_steps=400, mu_peak=0.5, mu_valley=0.02`."),
    AlgorithmSpec("raft", "RAFT: SFT on the rewarded rollouts (rejection sampling fine-tuning).",
        Paper("RAFT: Reward rAnked FineTuning for Generative Foundation Model Alignment", "2304.06767"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="sft", advantage_fn="raft", kl_loss_fn="none", entropy_loss_fn="none",
        details="Generate `num_generations` completions per prompt, keep the best-rewarded one of each group (the "
        "`raft` selection), and train the SFT loss on the kept completions only."),
    AlgorithmSpec("sppo", "sPPO: policy gradient inside a log-space trust region.",
        Paper("A general class of surrogate functions for stable and efficient reinforcement learning", "2108.05828"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="sppo", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        class_prefix="SPPO", display_name="sPPO",
        details="The policy gradient −A·log r is restricted to the tokens inside the trust region "
        "1/(1+ε) ≤ r ≤ 1+ε, with group-normalized advantages."),
    AlgorithmSpec("rec", "REC: REINFORCE with off-policy clipping / weighting / regularization.",
        Paper("Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm", "2509.24203"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="rec", advantage_fn="rec", kl_loss_fn="none", entropy_loss_fn="none",
        details="Group-centred rewards with a choice of off-policy clipping (`rec_clip_mode`), reweighting "
        "(`rec_weight`) and regularization (`rec_regularizer`)."),
    AlgorithmSpec("m2po", "M2PO: masks the largest log-ratio outliers of stale rollouts (second-moment trust region).",
        Paper("Prosperity before Collapse: How Far Can Off-Policy RL Reach with Stale Data on LLMs?", "2510.01161"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="m2po", advantage_fn="grpo", kl_loss_fn="none", entropy_loss_fn="none",
        details="For stale rollouts: train with `steps_per_generation > gradient_accumulation_steps`, so that each "
        "generation batch feeds several optimizer steps and π_old lags behind π. Among the trust-region tokens (A > 0 "
        "with r > 1, A < 0 with r < 1) the largest (log r)² are masked until their mean is at most `m2_threshold`; "
        "the kept tokens get the unclipped −A·r (Trinity-RFT main's `m2po`). The selection runs per micro-batch: "
        "with `gradient_accumulation_steps=1` on one process it is the paper's selection over the optimizer batch. "
        "Its natural home is asynchronous training, where the samples really are stale: "
        "`AsyncGRPOConfig(policy_loss_fn='m2po')` selects over the whole optimizer window (every micro-batch and "
        "process) against the sampler's log-probs."),
    AlgorithmSpec("async_grpo", "Asynchronous GRPO: a rollout worker generates while the trainer trains on samples "
        "up to `max_staleness` versions old.",
        Paper("AReaL: A Large-Scale Asynchronous Reinforcement Learning System for Language Reasoning", "2505.24298"),
        use_reference=True, repeat_times=8, trainer="async",
        policy_loss_fn="ppo", advantage_fn="grpo", kl_loss_fn="k2", entropy_loss_fn="default",
        class_prefix="AsyncGRPO", display_name="Async GRPO",
        argument_defaults=(("clip_ratio_c", None), ("epsilon", 1e-8), ("std_unbiased", False),
            ("group_of_one", "zero")),
        details="On TRL's experimental `AsyncGRPOTrainer`: the advantage is computed in the rollout worker on each "
        "complete group, the loss against the sampler's log-probs μ. Any policy loss and group advantage composes "
        "(`policy_loss_fn`, `advantage_fn`); for stale samples `policy_loss_fn='decoupled_ppo'` (AReaL's decoupled "
        "PPO), `'m2po'` (over the optimizer window) or verl's `rollout_is` / `rollout_rs` against μ. The defaults are "
        "TRL's `trl.experimental.async_grpo.AsyncGRPOTrainer` objective: PPO clip without Trinity-RFT's dual clip "
        "(`clip_ratio_c=None`), GRPO advantages over the population std + 1e-8 (`std_unbiased=False`, "
        "`advantage_epsilon=1e-8`) and advantage 0 for a group with one scored sample (`group_of_one='zero'`); "
        "Trinity-RFT's are `clip_ratio_c=3.0`, `std_unbiased=True`, `advantage_epsilon=1e-6`, "
        "`group_of_one='reward'`, with which and `max_staleness=0` the update equals the synchronous trainer's."),
    AlgorithmSpec("multi_step_grpo", "GRPO over multi-turn runs: run-level advantages on every step.",
        Paper("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models", "2402.03300"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="ppo", advantage_fn="step_wise_grpo", kl_loss_fn="k2", entropy_loss_fn="default",
        class_prefix="MultiStepGRPO", display_name="Multi-step GRPO",
        details="For TRL's multi-turn rollouts (`tools`, `environment_factory`): each completion is segmented into "
        "the model's turns, and every turn of an episode gets the episode's group-normalized advantage (÷ its number "
        "of turns with `enable_step_norm`); tool outputs get none. `turns_as_samples=True` makes each turn a sample "
        "of the `seq-mean-*` aggregations, as the reference's per-turn experiences."),
    AlgorithmSpec("gigpo", "Group-in-group advantages for agents: episode-level plus anchor-state step-level.",
        Paper("Group-in-Group Policy Optimization for LLM Agent Training", "2505.10978"),
        use_reference=True, repeat_times=8,
        policy_loss_fn="ppo", advantage_fn="gigpo", kl_loss_fn="k2", entropy_loss_fn="default",
        class_prefix="GiGPO", display_name="GiGPO",
        details="For TRL's multi-turn rollouts: each model turn gets A_E + ω·A_S, A_S normalized over the turns of "
        "the batch that start from the same state: the environment's `state_key` when it has one, else the text "
        "the model saw before the turn (the prompt and the tool outputs so far). Turn rewards the environment "
        "records (`turn_rewards`) add to the episode's reward on the last turn."),
    AlgorithmSpec("on_policy_distill", "On-policy distillation: teacher log-probs as per-token advantages.",
        Paper("On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes", "2306.13649"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="ppo", advantage_fn="on_policy_distill", kl_loss_fn="none", entropy_loss_fn="none",
        trainer="distill", class_prefix="OnPolicyDistill", display_name="On-policy distillation",
        details="The student samples, a frozen teacher scores the sampled tokens, and the per-token advantage is "
        "`kl_coef`·(log π_teacher − log π_old) (+ `reward_weight`·Â with task rewards), trained with the `ppo` "
        "(default) or `importance_sampling` loss (Thinking Machines, \"On-Policy Distillation\", 2025; "
        "Trinity-RFT's `on_policy_distill`)."),
    AlgorithmSpec("jsd", "On-policy distillation with a Jensen-Shannon advantage: −JSD of student and teacher.",
        Paper("On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes", "2306.13649"),
        use_reference=False, repeat_times=8,
        policy_loss_fn="ppo", advantage_fn="jsd", kl_loss_fn="none", entropy_loss_fn="none",
        trainer="distill", class_prefix="JSD", display_name="JSD distillation",
        details="Trinity-RFT's `jsd`: the student samples, a frozen teacher scores the sampled tokens, and the "
        "per-token advantage is −`kl_coef`·JSD_β of the two log-probs (β = `lambda_coef`, 0.5 the symmetric JSD, 0 "
        "KL(student‖teacher), 1 KL(teacher‖student); GKD's generalized JSD), trained with the `ppo` loss. "
        "Trinity-RFT's defaults: `kl_coef` 1.0, `lambda_coef` 0.5. The advantage is the divergence's per-token "
        "policy-gradient weight, −(1 − β)·(log π_student − log M) for 0 < β < 1; Trinity-RFT's −JSD value, which "
        "for 0 < β < 1 is never negative and moves the student away from the teacher, is `jsd_form='reference'`."),
    AlgorithmSpec("cpt", "Continued pretraining: the negative log-likelihood of every token of plain text.",
        None,
        use_reference=False, repeat_times=1,
        policy_loss_fn="sft", advantage_fn=None, kl_loss_fn="none", entropy_loss_fn="none",
        trainer="cpt", class_prefix="CPT", display_name="CPT",
        details="Trinity-RFT's CPT (schema `cpt`): SFT on plain text, the loss on every token of the "
        "`dataset_text_field` column (default `text`); rows of chat messages or prompt / completion pairs are "
        "refused (train those with SFTConfig). TRL's equivalent is `trl.SFTTrainer` on a language-modeling dataset "
        "(`dataset_text_field`)."),
    AlgorithmSpec("online_dpo", "Online DPO: two sampled completions per prompt, ranked by reward, train DPO.",
        Paper("Direct Language Model Alignment from Online AI Feedback", "2402.04792"),
        use_reference=True, repeat_times=2,
        policy_loss_fn="dpo", advantage_fn=None, kl_loss_fn="none", entropy_loss_fn="none",
        trainer="online_dpo", class_prefix="OnlineDPO", display_name="Online DPO",
        details="TRL's experimental `OnlineDPOTrainer` with the ported loss: the policy samples two completions of "
        "each prompt, the reward functions rank them (`missing_eos_penalty` lowers a completion without an EOS), and "
        "the pair trains `loss_type` `sigmoid` −log σ(βΔ) or `ipo` (Δ − 1/(2β))² on the summed log-ratios Δ (not "
        "length-normalized, unlike DPOConfig's `ipo`); `beta` may list one β per epoch, and trl_ext's "
        "`label_smoothing` > 0 makes `sigmoid` conservative DPO. TRL's equivalent is "
        "`trl.experimental.online_dpo.OnlineDPOTrainer` with the same config (`label_smoothing` 0)."),
    AlgorithmSpec("sdft", "SDFT: on-policy self-distillation from the model itself prompted with a demonstration.",
        Paper("Self-Distillation Enables Continual Learning", "2601.19897"),
        use_reference=False, repeat_times=8,
        policy_loss_fn=None, advantage_fn=None, kl_loss_fn="none", entropy_loss_fn="none",
        trainer="sdft", class_prefix="SDFT", display_name="SDFT",
        details="TRL's experimental `SDFTTrainer` with the ported loss (`trl_ext.losses.self_distillation`): the "
        "student samples completions of each `prompt`, the teacher (the initial, live or EMA weights: "
        "`teacher_model_kind`) scores them prompted with the row's `privileged_context` (a demonstration), and the "
        "student is pulled toward the teacher's next-token distributions: the generalized JSD (`distillation_alpha`) "
        "over the student's top-k (`distillation_topk`, default), the whole vocabulary or the sampled token "
        "(`distillation_mode`), averaged per completion. No reward. TRL's equivalent is "
        "`trl.experimental.sdft.SDFTTrainer` with the same config."),
    AlgorithmSpec("a2po", "A*-PO: V* estimated offline from reference samples, one completion per prompt regressed "
        "onto the optimal advantage.",
        Paper("Accelerating RL for LLM Reasoning with Optimal Advantage Regression", "2505.20686"),
        use_reference=True, repeat_times=1,
        policy_loss_fn="a2po", advantage_fn=None, kl_loss_fn="none", entropy_loss_fn="none",
        trainer="a2po", class_prefix="A2PO",
        details="TRL's experimental `A2POTrainer` with the ported loss (`trl_ext.losses.a2po`). Stage 1, before "
        "training: `num_value_samples` completions of the reference policy per prompt estimate V*(x) = "
        "β₁·log mean_i exp(r_i/β₁) (`beta1`; `trl_ext.advantages.a2po.optimal_value`), and with "
        "`filter_all_incorrect` the prompts whose samples all score 0 are dropped. Stage 2: one completion per "
        "prompt, loss = mean of (β₂·log π(y|x)/π_ref(y|x) − (r − V*(x)))² (`beta2`), normalized over the optimizer "
        "window. The reward is assumed binary. TRL's equivalent is `trl.experimental.a2po.A2POTrainer` with the "
        "same config."),
    AlgorithmSpec("tpo", "Triple Preference Optimization: a preference loss on (chosen, rejected) plus the NLL of a "
        "gold reference completion.",
        Paper("Triple Preference Optimization: Achieving Better Alignment using a Single Step Optimization",
              "2405.16681"),
        use_reference=False, repeat_times=1,
        policy_loss_fn="tpo", advantage_fn=None, kl_loss_fn="none", entropy_loss_fn="none",
        trainer="tpo", class_prefix="TPO", display_name="TPO",
        details="TRL's experimental `TPOTrainer` with the ported loss (`trl_ext.losses.tpo`): per triple, "
        "`loss_type` (`sigmoid` −log σ(β(log π(y_c) − log π(y_r))), `hinge`, `ipo`, or the length-normalized "
        "`tpo-l` with its margin `tpo_l_gamma`) on the chosen and rejected completions, plus `tpo_alpha` times the "
        "token-mean NLL of the reference completions; no reference model. Normalized over the optimizer window. "
        "TRL's equivalent is `trl.experimental.tpo.TPOTrainer` with the same config."),
    AlgorithmSpec("gkd", "Generalized Knowledge Distillation: the generalized JSD to a teacher over the whole "
        "vocabulary, on a mix of the student's own completions and the dataset's.",
        Paper("On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes", "2306.13649"),
        use_reference=False, repeat_times=1,
        policy_loss_fn=None, advantage_fn=None, kl_loss_fn="none", entropy_loss_fn="none",
        trainer="gkd", class_prefix="GKD", display_name="GKD",
        details="TRL's experimental `GKDTrainer` with the ported loss (`trl_ext.losses.gkd`): with probability "
        "`lmbda` a batch's completions are sampled from the student (`temperature`, `max_new_tokens`), else they "
        "are the dataset's, or the teacher's samples with `seq_kd`; the loss is the generalized JSD (`beta`: 0 "
        "forward KL, 1 reverse KL) between the student's and the teacher's next-token distributions at every "
        "completion token, summed and divided by the optimizer window's completion tokens. Rows are chat "
        "`messages` (the last one the completion); the teacher (`teacher_model_name_or_path`) shares the "
        "student's vocabulary. TRL's equivalent is `trl.experimental.gkd.GKDTrainer` with the same config."),
    AlgorithmSpec("iw_opd", "IW-OPD: on-policy distillation whose per-token teacher log-ratio is weighted down as the "
        "student's rollout drifts from the teacher.",
        Paper("On the Position Bias of On-Policy Distillation", "2606.22600"),
        use_reference=False, repeat_times=1,
        policy_loss_fn=None, advantage_fn=None, kl_loss_fn="none", entropy_loss_fn="none",
        trainer="iw_opd", class_prefix="IWOPD", display_name="IW-OPD",
        details="TRL's experimental `IWOPDTrainer` with the ported loss (`trl_ext.losses.iw_opd`): the student "
        "samples its completions of chat `messages` prompts; with a_t = log π_teacher(y_t) − log π_student(y_t) "
        "(vLLM's sampler log-probs where used) and D_<t the |a| accumulated before token t over the row's total D, "
        "the loss is −Σ_t (1 + γ·(1 − D_<t/D))·a_t·log π_student(y_t), weights and advantages detached "
        "(`iw_opd_gamma` γ, `iw_opd_epsilon` the floor of D), divided by the optimizer window's completion tokens. "
        "`distillation_objective='jsd'` trains TRL's generalized JSD instead (`beta`, `loss_top_k`, "
        "`loss_add_tail`, `reverse_kl_top_1_mode`, `lmbda`). The teacher is local (`teacher_model_name_or_path`, "
        "sharing the student's tokenizer) or a vLLM server (`use_teacher_server`). TRL's equivalent is "
        "`trl.experimental.iw_opd.IWOPDTrainer` with the same config, which normalizes by the dataloader's labels "
        "instead (see docs/algorithms/iw_opd.md)."),
    AlgorithmSpec("gold", "GOLD: on-policy distillation from a teacher of any model family (Universal Logit "
        "Distillation on byte-aligned spans across tokenizers).",
        Paper("Towards Cross-Tokenizer Distillation: the Universal Logit Distillation Loss for LLMs", "2402.12030"),
        use_reference=False, repeat_times=1,
        policy_loss_fn=None, advantage_fn=None, kl_loss_fn="none", entropy_loss_fn="none",
        trainer="gold", class_prefix="GOLD", display_name="GOLD",
        details="TRL's experimental `GOLDTrainer` (General Online Logit Distillation, the Hugging Face blog post "
        "\"Unlocking On-Policy Distillation for Any Model Family\", 2025) with the ported losses "
        "(`trl_ext.losses.gold`): with probability `lmbda` a micro-batch's completions are sampled from the student, "
        "else they are the dataset's. With `use_uld_loss=True` the teacher re-tokenizes the text with its own "
        "tokenizer, the two tokenizations are aligned by byte offsets and split tokens merged "
        "(`uld_token_merge_strategy`), and the student's sorted probabilities are pulled to the teacher's (ULD; "
        "`uld_use_hybrid_loss`: a JSD over the tokens both vocabularies share); else the generalized JSD (`beta`) "
        "with one tokenizer. TRL's equivalent is `trl.experimental.gold.GOLDTrainer` with the same config."),
    AlgorithmSpec("sdpo", "SDPO: a GRPO-style policy loss plus self-distillation from the model given feedback.",
        Paper("Reinforcement Learning via Self-Distillation", "2601.20802"),
        use_reference=False, repeat_times=8,
        policy_loss_fn=None, advantage_fn=None, kl_loss_fn="none", entropy_loss_fn="none",
        trainer="sdpo", class_prefix="SDPO", display_name="SDPO",
        details="TRL's experimental `SDPOTrainer` with the ported objective (`trl_ext.losses.self_distillation."
        "SDPOLoss`): the reward functions score `num_generations` completions per prompt; a completion whose group "
        "holds another successful one (reward ≥ `success_reward_threshold`) is scored by the model itself (an EMA "
        "teacher by default) reprompted with that solution, and the loss is (1 − `distillation_weight`)·TRL's GRPO "
        "clip loss on the group-normalized advantages (`loss_type`, `epsilon`, `epsilon_high`, through "
        "`trl_ext.losses.trl_grpo.TRLGRPOLoss`) + `distillation_weight`·the self-distillation (sampled-token reverse "
        "KL by default). Its loss is the trainer's own objective, not a composed policy loss and advantage: "
        "`policy_loss_fn` and `advantage_fn` are None. TRL's equivalent is `trl.experimental.sdpo.SDPOTrainer` with "
        "the same config."),
]})
# fmt: on
