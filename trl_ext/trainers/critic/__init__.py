"""The critic family: critic PPO, a value model beside the policy."""
