"""`GroupScorer` / `check_async_estimator` (trl_ext.async_rollout.scoring): rewards and advantages of one group
against closed forms written here, None handling, drops, weights, and the refusals."""

from __future__ import annotations

import functools
import math
import pickle

import numpy as np
import pytest

from trl_ext.advantages import get_advantage_fn
from trl_ext.async_rollout import GroupScorer, check_async_estimator
from trl_ext.async_rollout.scoring import IN_GROUP, IN_WINDOW, WINDOW_BASELINE_KEY, WINDOW_REWARD_KEY
from trl_ext.toy import repeat_letter_reward

PROMPT = "Repeat the letter c:"
COMPLETIONS = [" c c c", " c d", "", " c", " e e e", " c c"]
TARGET = ["c"] * len(COMPLETIONS)
LETTER_REWARD = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]  # repeat_letter_reward of COMPLETIONS, by hand


def length_reward(completions, **kwargs):
    """A second reward: the completion's length in characters divided by 10."""
    return [len(c) / 10 for c in completions]


def none_for_short(completions, **kwargs):
    """Unscorable (None) for completions shorter than 3 characters, else 2.0."""
    return [None if len(c) < 3 else 2.0 for c in completions]


def all_none(completions, **kwargs):
    return [None] * len(completions)


async def async_length_reward(completions, **kwargs):
    return [len(c) / 10 for c in completions]


def kwargs_echo(completions, prompts, completion_ids, target, **kwargs):
    """1.0 when the reward function received the group's prompts, ids and dataset column."""
    ok = prompts == [PROMPT] * len(completions) and completion_ids == [[7, 8]] * len(completions)
    return [float(ok and t == "c") for t in target]


def wrong_length(completions, **kwargs):
    return [1.0]


def infinite(completions, **kwargs):
    return [math.inf] * len(completions)


def _score(scorer: GroupScorer, completions=COMPLETIONS, group_id: int = 3):
    n = len(completions)
    return scorer.score(
        prompts=[PROMPT] * n,
        completions=list(completions),
        completion_ids=[[7, 8]] * n,
        group_id=group_id,
        reward_kwargs={"target": ["c"] * n},
    )


def grpo_closed_form(rewards, eps=1e-6):
    """(R - mean) / (std + eps), std the unbiased (ddof=1) group std: trl_ext's `grpo` (GRPOAdvantage docstring)."""
    r = np.asarray(rewards, dtype=np.float64)
    return (r - r.mean()) / (r.std(ddof=1) + eps)


def test_grpo_rewards_and_advantages_match_the_closed_form_with_weights():
    scorer = GroupScorer([repeat_letter_reward, length_reward], reward_weights=[2.0, -0.5])
    score = _score(scorer)
    lengths = np.array([len(c) / 10 for c in COMPLETIONS])
    expected_rewards = 2.0 * np.array(LETTER_REWARD) - 0.5 * lengths
    np.testing.assert_allclose(score.rewards, expected_rewards, rtol=0, atol=1e-12)
    np.testing.assert_allclose(score.advantages, grpo_closed_form(expected_rewards), rtol=1e-10, atol=1e-12)
    assert score.keep.all()
    np.testing.assert_array_equal(score.rewards_per_func, np.stack([LETTER_REWARD, lengths]))
    assert score.metrics["reward_mean"] == pytest.approx(expected_rewards.mean())
    assert score.metrics["reward_std"] == pytest.approx(expected_rewards.std())  # population std, as TRL logs it
    assert score.sample_metrics(4) == {
        "reward": pytest.approx(expected_rewards[4]),
        "reward_std": pytest.approx(expected_rewards.std()),
        "rewards/repeat_letter_reward": 0.0,
        "rewards/length_reward": pytest.approx(0.6),
    }


def test_grpo_epsilon_argument_is_used():
    score = _score(GroupScorer(repeat_letter_reward, advantage_fn="grpo", advantage_fn_args={"epsilon": 0.5}))
    np.testing.assert_allclose(score.advantages, grpo_closed_form(LETTER_REWARD, eps=0.5), rtol=1e-12)


def test_rloo_matches_the_leave_one_out_baseline():
    score = _score(GroupScorer([repeat_letter_reward, length_reward], advantage_fn="rloo"))
    r = np.array(LETTER_REWARD) + np.array([len(c) / 10 for c in COMPLETIONS])
    loo = [r[i] - np.mean(np.delete(r, i)) for i in range(len(r))]
    np.testing.assert_allclose(score.advantages, loo, rtol=1e-10, atol=1e-12)


def test_async_reward_functions_are_awaited():
    sync = _score(GroupScorer([repeat_letter_reward, length_reward]))
    mixed = _score(GroupScorer([repeat_letter_reward, async_length_reward]))
    np.testing.assert_array_equal(sync.rewards, mixed.rewards)
    np.testing.assert_array_equal(sync.advantages, mixed.advantages)


def test_reward_functions_receive_prompts_ids_and_dataset_columns():
    score = _score(GroupScorer(kwargs_echo))
    np.testing.assert_array_equal(score.rewards, np.ones(len(COMPLETIONS)))


def test_none_rewards_nan_sum_and_unscorable_samples():
    # none_for_short scores only completions of >= 3 characters; all_none scores nothing.
    scorer = GroupScorer([none_for_short, all_none])
    score = _score(scorer)
    scorable = np.array([len(c) >= 3 for c in COMPLETIONS])
    assert np.isnan(score.rewards[~scorable]).all() and (score.rewards[scorable] == 2.0).all()
    assert (score.advantages[~scorable] == 0).all() and score.keep.all()  # unscorable: advantage 0, still enqueued
    assert score.metrics["unscorable"] == (~scorable).sum()
    assert np.isnan(score.rewards_per_func[1]).all()

    # One function None on a sample, another scores it: the NaN-sum keeps the scored part.
    score = _score(GroupScorer([repeat_letter_reward, none_for_short], reward_weights=[1.0, 3.0]))
    expected = np.array(LETTER_REWARD) + np.where(scorable, 6.0, 0.0)
    np.testing.assert_allclose(score.rewards, expected)
    np.testing.assert_allclose(score.advantages, grpo_closed_form(expected), rtol=1e-10)

    # A group of one scorable sample: GRPO's mean 0 and std 1.
    score = _score(GroupScorer([repeat_letter_reward, none_for_short], reward_weights=[1.0, 1.0]), COMPLETIONS[:1])
    assert score.advantages[0] == pytest.approx(3.0 / (1 + 1e-6))  # a group of one: mean 0, std 1

    score = _score(GroupScorer(all_none))
    assert np.isnan(score.rewards).all() and (score.advantages == 0).all() and math.isnan(score.metrics["reward_std"])


def test_partly_unscorable_group_uses_only_the_scorable_rewards():
    score = _score(GroupScorer(functools.partial(_every_other, offset=1.0)))
    r = np.array([1.0, np.nan, 3.0, np.nan, 5.0, np.nan])
    np.testing.assert_array_equal(np.isnan(score.rewards), np.isnan(r))
    np.testing.assert_allclose(score.advantages[::2], grpo_closed_form(r[::2]), rtol=1e-10)
    assert (score.advantages[1::2] == 0).all() and score.keep.all()


def _every_other(completions, offset, **kwargs):
    return [None if i % 2 else i + offset for i in range(len(completions))]


def test_dropped_groups_are_not_kept():
    # std_threshold: a group whose reward std is <= the threshold is dropped (keep False, advantage 0).
    scorer = GroupScorer(repeat_letter_reward, advantage_fn_args={"std_threshold": 0.1})
    same = _score(scorer, [" c c", " c", " c c c", " c"])
    assert not same.keep.any() and (same.advantages == 0).all() and same.metrics["dropped"] == 4
    varied = _score(scorer)
    assert varied.keep.all() and varied.metrics["dropped"] == 0
    np.testing.assert_allclose(varied.advantages, grpo_closed_form(LETTER_REWARD), rtol=1e-10)


def test_rec_drop_uses_a_generator_seeded_by_the_group():
    # REC's drop="balance" drops (negatives - positives) random negatives of a group; positives never.
    scorer = GroupScorer(repeat_letter_reward, advantage_fn="rec", advantage_fn_args={"drop": "balance"}, seed=5)
    completions = [" c", " d", " e", " f", " g", " h"]  # 1 positive, 5 negatives -> 4 negatives dropped
    kept = []
    for group_id in range(12):
        score = _score(scorer, completions, group_id)
        assert score.keep[0] and score.keep.sum() == 2 and score.metrics["dropped"] == 4
        again = _score(scorer, completions, group_id)
        np.testing.assert_array_equal(score.keep, again.keep)  # reproducible per (seed, group id)
        kept.append(int(np.flatnonzero(score.keep[1:])[0]))
    assert len(set(kept)) > 1  # the random choice differs between groups
    other_seed = GroupScorer(repeat_letter_reward, advantage_fn="rec", advantage_fn_args={"drop": "balance"}, seed=6)
    assert [int(np.flatnonzero(_score(other_seed, completions, g).keep[1:])[0]) for g in range(12)] != kept


@pytest.mark.parametrize(
    ("name", "args", "reason"),
    [
        ("ppo", {}, "values"),
        ("jsd", {}, "teacher_logprob"),
        ("clipb", {}, "optimizer window does not provide: logprobs, entropy"),
        ("grpo", {"rank_penalty": 0.5}, "logprobs"),
        ("grpo", {"std_threshold": 0.0, "duplicate_experiences": True}, "duplicate_experiences"),
    ],
)
def test_check_async_estimator_refuses(name, args, reason):
    with pytest.raises(ValueError, match=rf"check_async_estimator: advantage estimator '{name}'.*{reason}"):
        check_async_estimator(get_advantage_fn(name, **args))
    with pytest.raises(ValueError, match=reason):
        GroupScorer(repeat_letter_reward, advantage_fn=name, advantage_fn_args=args)


@pytest.mark.parametrize("name", ["grpo", "rloo", "reinforce", "opmd", "asymre", "rec", "raft"])
def test_check_async_estimator_accepts_group_estimators(name):
    assert check_async_estimator(get_advantage_fn(name)) == IN_GROUP


@pytest.mark.parametrize(
    "name",
    ["reinforceplusplus", "reinforce_plus_plus_baseline", "grpo_verl", "opmd_verl", "asymre_verl", "gpg", "remax"],
)
def test_token_level_estimators_run_over_the_trainers_window(name):
    assert check_async_estimator(get_advantage_fn(name)) == IN_WINDOW
    assert GroupScorer(repeat_letter_reward, advantage_fn=name).needs_greedy_baseline == (name == "remax")


@pytest.mark.parametrize("name", ["gigpo", "step_wise_grpo"])
def test_per_turn_estimators_run_over_the_trainers_window_but_take_no_teacher_or_critic(name):
    assert check_async_estimator(get_advantage_fn(name)) == IN_WINDOW
    assert GroupScorer(repeat_letter_reward, advantage_fn=name).per_turn
    for part in ("teacher", "critic"):
        with pytest.raises(ValueError, match=rf"'{name}' cannot run .*per turn.* takes no teacher or critic"):
            check_async_estimator(get_advantage_fn(name), **{part: True})


def test_a_window_estimator_is_not_run_in_the_worker_which_stamps_the_shaped_reward():
    """REINFORCE++ runs in the trainer: the worker's samples carry advantage 0 and the reward the estimator is to
    receive, DAPO's overlong penalty included (lengths 8, 2, 6, 2, as in the overlong test below)."""
    scorer = GroupScorer(
        repeat_letter_reward,
        advantage_fn="reinforceplusplus",
        overlong_buffer=4,
        overlong_penalty_factor=1.0,
        max_completion_length=8,
    )
    assert scorer.estimates_in_window
    score = _score_ids(scorer, [" c", " d", " c", " d"], [8, 2, 6, 2])
    np.testing.assert_array_equal(score.advantages, [0.0] * 4)
    assert score.keep.all()
    np.testing.assert_allclose(score.window_rewards, [0.0, 0.0, 0.5, 0.0])
    assert [score.sample_metrics(i)[WINDOW_REWARD_KEY] for i in range(4)] == pytest.approx([0.0, 0.0, 0.5, 0.0])
    assert score.sample_metrics(0)["reward"] == 1.0  # the logged reward stays the task's
    assert WINDOW_REWARD_KEY not in _score_ids(GroupScorer(repeat_letter_reward), [" c"], [2]).sample_metrics(0)


def test_constructor_refusals():
    with pytest.raises(ValueError, match=r"reward_funcs\[1\]='my/reward-model'"):
        GroupScorer([repeat_letter_reward, "my/reward-model"])
    with pytest.raises(ValueError, match=r"reward_funcs\[0\]=3"):
        GroupScorer([3])
    with pytest.raises(ValueError, match="reward_weights has 1 entries but there are 2"):
        GroupScorer([repeat_letter_reward, length_reward], reward_weights=[1.0])
    with pytest.raises(ValueError, match=r"reward_weights\[0\]=nan"):
        GroupScorer(repeat_letter_reward, reward_weights=[math.nan])
    with pytest.raises(ValueError, match="unknown advantage function 'no_such_estimator'"):
        GroupScorer(repeat_letter_reward, advantage_fn="no_such_estimator")


def test_unpicklable_reward_function_is_named():
    with pytest.raises(TypeError, match=r"reward_funcs\[1\] \('<lambda>'\) cannot be pickled"):
        GroupScorer([repeat_letter_reward, lambda completions, **kw: [0.0] * len(completions)])

    def closure(completions, **kwargs):
        return [0.0] * len(completions)

    with pytest.raises(TypeError, match=r"reward_funcs\[0\] \('closure'\) cannot be pickled"):
        GroupScorer(closure)
    scorer = GroupScorer([repeat_letter_reward, functools.partial(_every_other, offset=2.0)])
    clone = pickle.loads(pickle.dumps(scorer))
    np.testing.assert_array_equal(_score(clone).rewards, _score(scorer).rewards)


def test_bad_reward_values_name_the_function():
    with pytest.raises(ValueError, match="'wrong_length' returned 1 rewards for 6 completions"):
        _score(GroupScorer(wrong_length))
    with pytest.raises(ValueError, match="'infinite' returned inf for completion 0"):
        _score(GroupScorer(infinite))


def test_group_advantages_of_given_rewards():
    # The estimator step alone (for a loop that computes its rewards itself): NaN = unscorable, advantage 0, kept.
    scorer = GroupScorer([], advantage_fn="rloo")
    rewards = np.array([1.0, np.nan, 0.0, 4.0])
    advantages, keep = scorer.group_advantages(rewards, [[1], [2], [3, 4], [5]], group_id=0)
    scorable = rewards[[0, 2, 3]]
    loo = [r - np.mean(np.delete(scorable, i)) for i, r in enumerate(scorable)]
    np.testing.assert_allclose(advantages[[0, 2, 3]], loo, rtol=1e-12)
    assert advantages[1] == 0 and keep.all()
    with pytest.raises(ValueError, match="one entry per completion_ids row"):
        scorer.group_advantages(rewards, [[1]], group_id=0)
    with pytest.raises(ValueError, match="no reward functions"):
        _score(scorer)


# ---- DAPO in the worker: dynamic sampling and overlong shaping ------------------------------------------------------


def _score_ids(scorer: GroupScorer, completions, lengths, group_id: int = 3, baseline=None):
    n = len(completions)
    return scorer.score(
        prompts=[PROMPT] * n,
        completions=list(completions),
        completion_ids=[[7] * length for length in lengths],
        group_id=group_id,
        reward_kwargs={"target": ["c"] * n},
        baseline=baseline,
    )


def test_dynamic_sampling_drops_a_uniform_group_whole_and_keeps_an_informative_one():
    scorer = GroupScorer(repeat_letter_reward, drop_uniform_groups=True)
    uniform = _score_ids(scorer, [" c", " c c", " c"], [2, 4, 2])  # every completion right: rewards 1, 1, 1
    assert not uniform.keep.any() and uniform.metrics["uniform_group"] == 1.0
    np.testing.assert_array_equal(uniform.advantages, [0.0, 0.0, 0.0])
    assert uniform.metrics["dropped"] == 3 and uniform.metrics["reward_mean"] == 1.0
    informative = _score_ids(scorer, [" c", " d", " c"], [2, 2, 2])
    assert informative.keep.all() and informative.metrics["uniform_group"] == 0.0
    np.testing.assert_allclose(informative.advantages, grpo_closed_form([1.0, 0.0, 1.0]), rtol=1e-10)
    # without the switch the uniform group stays (advantage 0) and is enqueued
    plain = _score_ids(GroupScorer(repeat_letter_reward), [" c", " c c", " c"], [2, 4, 2])
    assert plain.keep.all() and plain.metrics["uniform_group"] == 0.0


def test_dynamic_sampling_counts_an_unscorable_reward_as_zero_as_the_synchronous_nan_sum_does():
    scorer = GroupScorer(none_for_short, drop_uniform_groups=True)
    assert not _score_ids(scorer, ["ab", "", "a"], [2, 1, 1]).keep.any()  # None, None, None: 0, 0, 0
    assert _score_ids(scorer, ["abc", "", "abcd"], [3, 1, 4]).keep.all()  # 2, None (0), 2: informative


def test_overlong_shaping_adds_dapos_penalty_before_the_estimator():
    """Lengths 8, 2, 6, 2 with max_completion_length 8, buffer 4, factor 1: penalties min(-(L - 4)/4, 0) = -1, 0,
    -0.5, 0 (arXiv 2503.14476 §3.4), added to the rewards 1, 0, 1, 0 before GRPO's advantage; the logged rewards
    stay the task's."""
    completions, lengths = [" c", " d", " c", " d"], [8, 2, 6, 2]
    scorer = GroupScorer(repeat_letter_reward, overlong_buffer=4, overlong_penalty_factor=1.0, max_completion_length=8)
    score = _score_ids(scorer, completions, lengths)
    shaped = np.array([1.0, 0.0, 1.0, 0.0]) + np.array([-1.0, 0.0, -0.5, 0.0])
    np.testing.assert_allclose(score.advantages, grpo_closed_form(shaped), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(score.rewards, [1.0, 0.0, 1.0, 0.0])
    assert score.metrics["overlong_penalty"] == pytest.approx(-1.5 / 4)
    half = GroupScorer(repeat_letter_reward, overlong_buffer=4, overlong_penalty_factor=0.5, max_completion_length=8)
    shaped_half = np.array([1.0, 0.0, 1.0, 0.0]) + 0.5 * np.array([-1.0, 0.0, -0.5, 0.0])
    np.testing.assert_allclose(_score_ids(half, completions, lengths).advantages, grpo_closed_form(shaped_half))


def test_dynamic_sampling_judges_the_task_rewards_before_the_length_penalty():
    """An all-correct group is uniform even when the penalty would spread its rewards (verl's `acc` metric)."""
    scorer = GroupScorer(repeat_letter_reward, drop_uniform_groups=True, overlong_buffer=4, max_completion_length=8)
    assert not _score_ids(scorer, [" c", " c"], [8, 2]).keep.any()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"drop_uniform_groups": "yes"}, "drop_uniform_groups"),
        ({"overlong_buffer": -1}, "overlong_buffer"),
        ({"overlong_buffer": 2.5, "max_completion_length": 8}, "overlong_buffer"),
        ({"overlong_penalty_factor": -0.1}, "overlong_penalty_factor"),
        ({"overlong_buffer": 4}, r"overlong_buffer=4 needs max_completion_length >= it \(got None\)"),
        ({"overlong_buffer": 9, "max_completion_length": 8}, "overlong_buffer=9 needs max_completion_length"),
    ],
)
def test_dapo_arguments_are_checked_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GroupScorer(repeat_letter_reward, **kwargs)


def test_remaxs_greedy_baseline_is_scored_like_the_samples_and_stamped_on_the_group():
    """ReMax: three greedy completions (three prompts, each its own `target`) scored in one call per reward function,
    weighted (1, 0.5) and NaN-summed, then shaped by DAPO's overlong penalty (max 8, buffer 4: lengths 8, 2, 6 give
    -1, 0, -0.5); a greedy completion no function scores gets baseline 0, never NaN. `score(baseline=b)` stamps b on
    every sample of the group, beside the shaped reward; the advantages stay 0 (the window's estimator makes them)."""
    scorer = GroupScorer(
        [repeat_letter_reward, none_for_short], reward_weights=[1.0, 0.5], advantage_fn="remax",
        overlong_buffer=4, overlong_penalty_factor=1.0, max_completion_length=8,
    )  # fmt: skip
    assert scorer.needs_greedy_baseline and scorer.estimates_in_window
    baselines, unscorable = scorer.baseline_rewards(
        prompts=["p1", "p2", "p3"],
        completions=[" c c", " d", " e e"],  # letter rewards 1, 1, 0; none_for_short 2, None, 2
        completion_ids=[[7] * 8, [7] * 2, [7] * 6],
        reward_kwargs={"target": ["c", "d", "c"]},
    )
    np.testing.assert_allclose(baselines, [1.0 + 1.0 - 1.0, 1.0 + 0.0, 0.0 + 1.0 - 0.5], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(unscorable, [False, False, False])
    only_none = GroupScorer(none_for_short, advantage_fn="remax", overlong_buffer=4, max_completion_length=8)
    baselines, unscorable = only_none.baseline_rewards(
        prompts=["p1", "p2"], completions=["ab", "abcd"], completion_ids=[[7] * 8, [7] * 2]
    )
    np.testing.assert_array_equal(baselines, [0.0, 2.0])  # unscorable: 0 (no penalty either), not NaN
    np.testing.assert_array_equal(unscorable, [True, False])

    score = _score_ids(scorer, [" c c c", " c", " d"], [8, 2, 6], baseline=0.25)
    assert score.window_baseline == 0.25
    np.testing.assert_array_equal(score.advantages, [0.0, 0.0, 0.0])
    np.testing.assert_allclose(score.window_rewards, [1.0 + 1.0 - 1.0, 1.0 + 0.0, 0.0 + 0.0 - 0.5])  # target c
    for i in range(3):
        assert score.sample_metrics(i)[WINDOW_BASELINE_KEY] == 0.25
        assert score.sample_metrics(i)[WINDOW_REWARD_KEY] == pytest.approx(score.window_rewards[i])
    with pytest.raises(ValueError, match=r"'remax' needs the group's greedy baseline \(baseline=...\)"):
        _score_ids(scorer, [" c"], [2])
    with pytest.raises(ValueError, match=r"baseline=nan is not valid; must be finite"):
        _score_ids(scorer, [" c"], [2], baseline=math.nan)
    with pytest.raises(ValueError, match=r"'grpo' reads no baseline"):
        _score_ids(GroupScorer(repeat_letter_reward), [" c"], [2], baseline=0.0)
    assert WINDOW_BASELINE_KEY not in _score_ids(GroupScorer(repeat_letter_reward), [" c"], [2]).sample_metrics(0)
    with pytest.raises(ValueError, match=r"baseline_rewards: prompts \(1\), completions \(2\)"):
        scorer.baseline_rewards(prompts=["p"], completions=["a", "b"], completion_ids=[[7], [7]])
