"""Test helpers shipped with the package: the OpInfo coverage harness, seeded random JSON
schemas for structured-output checks."""
