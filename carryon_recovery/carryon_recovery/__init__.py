"""Recovery skills, versioned skill library and reflection."""
