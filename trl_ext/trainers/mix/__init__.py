"""The MIX family: MIX and MIX-CHORD, rollouts and expert rows in one batch."""
