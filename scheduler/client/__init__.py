"""`wanka`, the command-line client of the portal's REST API (see `scheduler.client.cli`)."""
