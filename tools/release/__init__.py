"""Release bundles and staging them into a target's store."""
