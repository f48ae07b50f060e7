"""Whether the multi-turn estimators are unbiased when the policy controls how many turns an episode takes.

A two-decision task, small enough to take every expectation exactly: at turn 0 the policy stops (one turn,
reward `STOP_REWARD`) or goes on (logit θ0); an episode that goes on takes a second turn and answers right (reward
1, logit θ1) or wrong (reward 0). J(θ) = E[R] and its gradient are known in closed form. For each estimator, the
expected update E[Σ_turns A_turn ∇log π(turn)] is summed over every group of `G` episodes with its probability,
the per-turn advantages coming from trl_ext's own estimators on the reference's per-step layout.

What the README states, pinned here:
* `step_wise_grpo` puts the episode's GRPO advantage on each of its turns: exactly episode-level GRPO (TRL's one
  advantage per episode), whatever the turn counts. It inherits GRPO's division by the group std, which is biased
  on its own (here even the sign of the stop-or-go update flips in groups of 3).
* `enable_step_norm` divides it by the episode's number of turns, which the policy chooses: the later decision
  (only in two-turn episodes) gets exactly half the update, the stop-or-go decision something in between, so the
  decisions are reweighted by the turn counts: biased (the reference's behaviour).
* `gigpo`'s episode level (ω = 0, `fnorm="none"`) is (1 − 1/G)·∇J exactly: unbiased up to GRPO's own constant.
  Its step level's baseline is the mean return of the other turns that start from the same state, one term that
  does not depend on the turn's own action nor on when the episode stops (the construction verl issue #7244 shows
  to be biased sums one per-turn-index mean per remaining turn of the episode itself): each decision's expected
  update is its exact gradient times a positive factor, (1 − 1/n) averaged over the anchor group's size n.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from trl_ext.advantages import get_advantage_fn

G = 3
STOP_REWARD = 0.2
THETA = (0.3, -0.2)  # logits of going on and of answering right
OUTCOMES = ("stop", "right", "wrong")


def probabilities(theta: torch.Tensor) -> dict[str, torch.Tensor]:
    go, right = torch.sigmoid(theta[0]), torch.sigmoid(theta[1])
    return {"stop": 1 - go, "right": go * right, "wrong": go * (1 - right)}


def reward(outcome: str) -> float:
    return {"stop": STOP_REWARD, "right": 1.0, "wrong": 0.0}[outcome]


def true_gradient() -> torch.Tensor:
    theta = torch.tensor(THETA, dtype=torch.float64, requires_grad=True)
    p = probabilities(theta)
    objective = sum(p[o] * reward(o) for o in OUTCOMES)
    (gradient,) = torch.autograd.grad(objective, theta)
    return gradient


def turn_scores(outcome: str) -> list[torch.Tensor]:
    """∇_θ log π of each turn's action: turn 0 stops or goes on (θ0), turn 1 answers (θ1)."""
    go, right = (1 / (1 + math.exp(-t)) for t in THETA)
    go_on = torch.tensor([1 - go, 0.0], dtype=torch.float64)
    stop = torch.tensor([-go, 0.0], dtype=torch.float64)
    if outcome == "stop":
        return [stop]
    answer = torch.tensor([0.0, 1 - right if outcome == "right" else -right], dtype=torch.float64)
    return [go_on, answer]


def expected_update(advantages_of) -> torch.Tensor:
    """E[Σ_episodes Σ_turns A_turn ∇log π(turn)] / G over every group of G episodes; `advantages_of(outcomes)`
    gives the per-turn advantages of a group (the reference's layout: one row per turn, runs in order)."""
    p = {o: v.item() for o, v in probabilities(torch.tensor(THETA, dtype=torch.float64)).items()}
    total = torch.zeros(2, dtype=torch.float64)
    for outcomes in itertools.product(OUTCOMES, repeat=G):
        weight = math.prod(p[o] for o in outcomes)
        scores = [score for o in outcomes for score in turn_scores(o)]
        advantages = advantages_of(outcomes)
        assert len(advantages) == len(scores)
        total += weight * sum(a * s for a, s in zip(advantages, scores, strict=True))
    return total / G


def layout(outcomes) -> dict:
    """The per-step rows of a group: sparse rewards (the outcome on the last turn), runs, states (turn 0 starts from
    the prompt, turn 1 from "went on")."""
    rewards, runs, states = [], [], []
    for run, outcome in enumerate(outcomes):
        turns = 1 if outcome == "stop" else 2
        rewards += [0.0] * (turns - 1) + [reward(outcome)]
        runs += [run] * turns
        states += ["prompt", "went on"][:turns]
    return {"rewards": torch.tensor(rewards, dtype=torch.float64), "run_ids": runs, "state_ids": states}


def per_turn(name: str, **arguments):
    fn = get_advantage_fn(name, **arguments)

    def advantages_of(outcomes):
        rows = layout(outcomes)
        inputs = {"run_ids": rows["run_ids"]}
        if name == "gigpo":
            inputs["state_ids"] = rows["state_ids"]
        result = fn.compute(rows["rewards"], [0] * len(rows["run_ids"]), **inputs)
        return result.advantages.tolist()

    return advantages_of


def episode_grpo(outcomes):
    """TRL's GRPO: one advantage per episode (its group-normalized reward), on every turn of the episode."""
    rewards = torch.tensor([reward(o) for o in outcomes], dtype=torch.float64)
    advantages = get_advantage_fn("grpo").compute(rewards, [0] * G).advantages.tolist()
    return [a for a, o in zip(advantages, outcomes, strict=True) for _ in range(1 if o == "stop" else 2)]


def test_the_task_has_a_gradient_in_both_decisions():
    gradient = true_gradient()
    assert gradient.abs().min() > 0.05


def test_step_wise_grpo_is_episode_level_grpo():
    for outcomes in itertools.product(OUTCOMES, repeat=G):
        assert per_turn("step_wise_grpo")(outcomes) == pytest.approx(episode_grpo(outcomes), abs=1e-12)


def test_group_std_normalization_is_biased_even_in_sign():
    # Not a multi-turn effect: GRPO's division by the group std (step_wise_grpo, TRL's default scale_rewards) keeps
    # only each episode's rank in its group. Stopping (reward 0.2) beats a wrong answer (0) as much as it loses to a
    # right one (1), and wrong answers are the more likely: the expected update favours stopping, though going on
    # earns more on average (∂J/∂θ0 > 0).
    update = expected_update(per_turn("step_wise_grpo"))
    gradient = true_gradient()
    assert update[0] < 0 < gradient[0]
    assert update[1] > 0 and gradient[1] > 0


def test_step_norm_weighs_episodes_by_their_own_turn_count():
    plain = expected_update(per_turn("step_wise_grpo"))
    normed = expected_update(per_turn("step_wise_grpo", enable_step_norm=True))
    assert normed[1].item() == pytest.approx(plain[1].item() / 2, rel=1e-12)  # only two-turn episodes answer
    assert abs(plain[0]) / 2 < abs(normed[0]) < abs(plain[0])  # the stop-or-go decision: only some halved
    ratios = normed / plain
    assert abs(ratios[0] / ratios[1] - 1) > 0.2  # the decisions reweighted by the turn counts the policy chose


def test_gigpo_episode_level_is_unbiased_up_to_the_group_constant():
    update = expected_update(per_turn("gigpo", omega=0.0, epsilon=1e-12))
    torch.testing.assert_close(update, (1 - 1 / G) * true_gradient(), rtol=1e-10, atol=1e-12)


def test_gigpo_step_level_scales_each_decision_by_its_anchor_groups():
    go = torch.sigmoid(torch.tensor(THETA[0], dtype=torch.float64)).item()
    # n = 1 + the number of the G − 1 other episodes that also went on: E[1 − 1/n] for an episode that went on.
    went_on = sum(math.comb(G - 1, k) * go**k * (1 - go) ** (G - 1 - k) * (1 - 1 / (1 + k)) for k in range(G))
    gradient = true_gradient()
    with_steps, episode_only = (expected_update(per_turn("gigpo", omega=w, epsilon=1e-12)) for w in (1.0, 0.0))
    step_only = with_steps - episode_only
    expected = torch.stack([(1 - 1 / G) * gradient[0], went_on * gradient[1]])
    torch.testing.assert_close(step_only, expected, rtol=1e-10, atol=1e-12)
