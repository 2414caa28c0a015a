"""The tidemark operator: one ``HudiTable`` resource per Hudi table; table services scheduled per table."""
