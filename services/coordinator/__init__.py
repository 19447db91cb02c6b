"""services.coordinator package."""
