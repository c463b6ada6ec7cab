"""The ``ldap`` adapter: people, accounts, Unix groups and memberships in a directory."""
