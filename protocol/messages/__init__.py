"""Generated message codecs: see protocol/codegen.py."""
