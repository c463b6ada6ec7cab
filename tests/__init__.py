from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The checkout under test: its files (README, examples, chart) are what the tests read."""
