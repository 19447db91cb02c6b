"""tests.support package."""
