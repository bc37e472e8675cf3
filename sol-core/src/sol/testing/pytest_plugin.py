"""pytest plugin of sol.testing (fixtures)."""
