"""services.db package."""
