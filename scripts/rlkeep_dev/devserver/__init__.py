"""Local stand-ins for the services rlkeep talks to (tests and `make demo`)."""
