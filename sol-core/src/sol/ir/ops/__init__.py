"""Built-in ops; importing this package registers them all."""
