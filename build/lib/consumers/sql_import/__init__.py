"""The ``sql_import`` adapter: a vendor's import table whose trigger applies its business rules."""
