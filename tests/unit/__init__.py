"""tests.unit package."""
