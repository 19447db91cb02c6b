"""coordinator_api.routes package."""
