"""services.data package."""
