from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The checkout under test: its files (README, examples, chart) are what the tests read."""
CAMPUS = PROJECT_ROOT / "examples" / "campus.yaml"
"""The sample registry (also shipped in the package: ``mcq.resources``)."""
