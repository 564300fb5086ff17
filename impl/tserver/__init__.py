"""Tablet server: tablet manager, deletion, startup, tablet copy client and source sessions."""
