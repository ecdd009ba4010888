"""A2A (Agent2Agent): one task model, three wire dialects (0.1/OpenFang, 0.3, 1.0)."""
