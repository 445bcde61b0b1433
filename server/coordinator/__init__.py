"""The coordinator: tiering state in ``sys`` tables, the state machine, heartbeats and scheduling."""
