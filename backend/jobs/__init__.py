"""Long-running frame jobs (decompose, restyle) on the shared runner (:mod:`.runner`)."""
