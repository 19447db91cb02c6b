"""tests.e2e package."""
