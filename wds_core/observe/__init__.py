"""Looking at a pipeline run: profiles, metrics, and how well an epoch is shuffled."""
