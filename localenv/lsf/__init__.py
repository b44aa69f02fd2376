"""LSF-compatible command set (a stand-in; see README.md). Stdlib only: it runs on the login node."""
