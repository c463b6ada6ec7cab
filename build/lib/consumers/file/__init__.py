"""The ``file`` adapter: changes as JSON Lines or XML files, each written atomically."""
