"""Built-in plugins: history, metrics, audit, summary."""
