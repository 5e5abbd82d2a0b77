"""Visual judge of subtask success and failure."""
