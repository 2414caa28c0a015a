"""Table services: cleaning, savepoints and archival, each a pure planner over a timeline
snapshot plus an executor that applies the plan through the storage interface."""
