"""The console's pages: one module each, each with ``routes(ctx)``."""
