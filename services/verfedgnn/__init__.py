"""VerFedGNN: config, data types, the party and coordinator trainers, the round sequence and its wire messages."""
