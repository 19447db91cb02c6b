"""coordinator_api package."""
