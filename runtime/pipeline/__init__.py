"""Pipeline files (Conduit version 2.2 YAML), validation and the transform chain."""
