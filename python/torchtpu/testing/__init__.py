"""Test helpers shipped with the package (the OpInfo coverage harness)."""
