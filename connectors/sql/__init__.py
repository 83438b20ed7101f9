"""What the SQL sinks share: options, URLs, table mapping and checks."""
