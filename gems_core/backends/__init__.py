"""Backends built into gems-core (vendor backends are separate distributions)."""
