"""Other libraries' APIs over the same losses (pure torch, no trl import): `trl_ext.compat.verl` (verl 0.9's
`core_algos` names and signatures) and `trl_ext.compat.nemo_rl` (NeMo-RL's loss-function protocol)."""
