"""tests.api package."""
