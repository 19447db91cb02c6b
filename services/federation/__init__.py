"""Protocol-neutral federation runtime: fan-out, links, aggregation strategies, the protocol registry."""
