"""One module of op cases per op module of gems_core."""
