"""The source tree's version; setup.cfg holds the same number for the installed metadata."""

VERSION = "0.1.0"
