"""Operator modules: each one registers the ATen overloads it implements."""
