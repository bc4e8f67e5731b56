"""Built-in schedules: every module here registers one schedule (or a family)."""
